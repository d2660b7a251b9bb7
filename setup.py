"""agentrl: JAX-native agentic RL post-training for language models."""

import pathlib

import setuptools

_HERE = pathlib.Path(__file__).parent


def _requirements():
  lines = (_HERE / "requirements.txt").read_text().splitlines()
  return [ln.strip() for ln in lines if ln.strip() and not ln.startswith("#")]


_EXTRAS = {
  # Parity tests only: logits are checked against the reference implementations (PEFT: LoRA).
  "test": ["torch==2.13.0", "transformers==5.24.0", "peft==0.21.2"],
  "jetstream": ["google-jetstream==0.2.2"],
  "ray": ["ray==2.60.0"],
}
_EXTRAS["all"] = sorted({r for v in _EXTRAS.values() for r in v})

setuptools.setup(
  name="agentrl",
  version="0.1.0",
  description="JAX-native agentic RL post-training: sandboxes, verifiable rewards, GRPO.",
  packages=setuptools.find_packages(include=["rl*", "models*", "envs*", "parallel*", "launch*"]),
  package_data={"envs": ["tasks/**/*"]},
  include_package_data=True,
  python_requires=">=3.10",
  install_requires=_requirements(),
  extras_require=_EXTRAS,
)
