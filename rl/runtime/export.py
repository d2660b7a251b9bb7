"""A training run's orbax checkpoint -> a Hugging Face folder, and "what did the user point at".

  export(workdir, out, step="latest" | "best" | N)  # config.json, safetensors, tokenizer
  resolve_checkpoint(path)   # an HF folder as is; a workdir or WORKDIR/checkpoints/N: exported
                             # once to WORKDIR/export/step-N and that folder returned

`launch.export`, `launch.eval`, `launch.generate_demo` and `launch.serve` go through
`resolve_checkpoint`, so each accepts an HF folder, a run directory or one orbax step directory.
`agentrl_export.json` names the run and step and carries the run's agent and engine settings
(rl.runtime.run_settings), which launch.eval and launch.serve start from.
A byte-tokenizer run writes no tokenizer.json (readers fall back to models.io.tokenizer.ByteTokenizer,
as for any folder without one) but does write its chat template (chat_template.jinja).
"""

from __future__ import annotations

import contextlib
import json
import logging
import pathlib

import numpy as np


class CheckpointError(ValueError):
  """A path that is neither an HF folder nor a run directory / orbax step with a checkpoint."""


def _experiment(workdir: pathlib.Path):
  from rl.config import to_experiment

  file = workdir / "experiment.json"
  try:
    return to_experiment(json.loads(file.read_text()), str(file))
  except (OSError, json.JSONDecodeError) as e:
    raise CheckpointError(f"{file}: cannot read the run's experiment ({e})") from None


def model_config(exp):
  """The run's model: its config, or the HF checkpoint's it started from."""
  if not exp.checkpoint:
    return exp.model
  from models.io.hf_config import config_from_hf

  # an HF folder, a named checkpoint, or another run's workdir (its export)
  file = pathlib.Path(resolve_checkpoint(exp.checkpoint)) / "config.json"
  return config_from_hf(json.loads(file.read_text()), file)


def _steps(ckpt_dir: pathlib.Path) -> list[int]:
  if not ckpt_dir.is_dir():
    return []
  return sorted(int(p.name) for p in ckpt_dir.iterdir() if p.is_dir() and p.name.isdigit())


def pick_step(workdir, step="latest") -> int:
  """The checkpoint step of `workdir` for "latest", "best" (highest held-out eval pass rate
  among the kept checkpoints, else the latest) or an int."""
  workdir = pathlib.Path(workdir)
  steps = _steps(workdir / "checkpoints")
  if not steps:
    raise CheckpointError(f"{workdir}: no checkpoint under {workdir / 'checkpoints'}")
  if step in ("latest", None, ""):
    return steps[-1]
  if step == "best":
    evals = {}
    metrics = workdir / "metrics.jsonl"
    if metrics.is_file():
      for line in metrics.read_text().splitlines():
        rec = json.loads(line)
        if "eval/pass_rate/overall" in rec:
          evals[int(rec["step"])] = rec["eval/pass_rate/overall"]
    scored = [s for s in steps if s in evals]
    return max(scored, key=lambda s: (evals[s], s)) if scored else steps[-1]
  try:
    n = int(step)
  except ValueError:
    raise CheckpointError(f"--step={step!r}: must be 'latest', 'best' or a step number") from None
  if n not in steps:
    raise CheckpointError(f"{workdir}: no checkpoint at step {n} (kept: {steps})")
  return n


def load_params(workdir, step: int):
  """(model config, params, frozen) of checkpoint `step` of a run, as host arrays (the train
  state's trainable params, and under LoRA its frozen base; None otherwise)."""
  import orbax.checkpoint as ocp

  workdir = pathlib.Path(workdir)
  cfg = model_config(_experiment(workdir))
  path = (workdir / "checkpoints" / str(step) / "state").absolute()
  ckptr = ocp.PyTreeCheckpointer()
  with _no_step_metadata_warning():
    try:
      meta = ckptr.metadata(path)
    except (FileNotFoundError, ValueError) as e:
      raise CheckpointError(f"{path}: not an orbax train state ({e})") from None
    tree = getattr(meta, "item_metadata", meta)
    tree = getattr(tree, "tree", tree)
    # Restored as host NumPy arrays, so any device count (or none of the run's) can export.
    # (The whole state is read: this orbax has no partial restore; the optimizer moments are
    # dropped right after.)
    out = ckptr.restore(path, args=ocp.args.PyTreeRestore(restore_args=_restore_args(tree)))
  return cfg, out["params"], out.get("frozen")


class _StepMetadataFilter(logging.Filter):
  def filter(self, record: logging.LogRecord) -> bool:
    return "_CHECKPOINT_METADATA" not in record.getMessage()


@contextlib.contextmanager
def _no_step_metadata_warning():
  """Silences orbax's 'Metadata file does not exist' warning: reading one item (`state`) of a
  CheckpointManager step, its step-level _CHECKPOINT_METADATA is one folder up, as it should be."""
  logger, flt = logging.getLogger("absl"), _StepMetadataFilter()
  logger.addFilter(flt)
  try:
    yield
  finally:
    logger.removeFilter(flt)


def _restore_args(tree):
  import jax
  import orbax.checkpoint as ocp

  return jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)


def _save_tokenizer(exp, workdir: pathlib.Path, out: pathlib.Path) -> None:
  from models.io.tokenizer import CHATML_TEMPLATE

  spec = exp.tokenizer
  if spec == "byte":
    (out / "chat_template.jinja").write_text(CHATML_TEMPLATE)
    return
  from models.io import checkpoints

  src = workdir / "tokenizer" if spec.startswith("bpe:") else checkpoints.resolve(spec)
  for name in (
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "chat_template.jinja",
    "special_tokens_map.json",
  ):
    if (src / name).is_file():
      (out / name).write_bytes((src / name).read_bytes())
  if not (out / "tokenizer.json").is_file():
    raise CheckpointError(f"{src}: the run's tokenizer ({spec!r}) has no tokenizer.json")


def export(workdir, out, step="latest", adapters=False) -> pathlib.Path:
  """Writes checkpoint `step` of run `workdir` as an HF folder `out`; returns `out`.

  A LoRA run exports its merged weights, or with `adapters` its adapters alone (PEFT layout:
  adapter_config.json + adapter_model.safetensors, to load on the run's base model)."""
  from models.io import hf, peft_io

  workdir, out = pathlib.Path(workdir), pathlib.Path(out)
  n = pick_step(workdir, step)
  cfg, params, frozen = load_params(workdir, n)
  exp = _experiment(workdir)
  if frozen is None:
    if adapters:
      raise CheckpointError(f"{workdir}: --adapters needs a LoRA run (train.lora.rank is 0)")
    hf.save(out, cfg, params)
  elif adapters:  # a LoRA state holds the adapters as `params`, the base as `frozen`
    peft_io.save_adapters(out, cfg, params, exp.train.lora, base_model=exp.checkpoint)
  else:
    peft_io.save_merged(out, cfg, frozen, params, exp.train.lora)
  _save_tokenizer(exp, workdir, out)
  from rl.runtime import run_settings  # the run's agent and engine: eval/serve's defaults

  meta = {"workdir": str(workdir.absolute()), "step": n}
  meta["settings"] = run_settings.from_experiment(exp)
  (out / "agentrl_export.json").write_text(json.dumps(meta, indent=1) + "\n")
  return out


def resolve_checkpoint(path, step="latest") -> str:
  """An HF folder for `path`: itself if it has config.json; a run directory or one of its
  orbax step directories (WORKDIR/checkpoints/N) exported to WORKDIR/export/step-N once; a
  named checkpoint (smollm2-135m-instruct) becomes its converted folder; a .gguf file stays."""
  from models.io import checkpoints  # a name converts its package's GGUF file once, cached

  p = checkpoints.resolve(path)
  if (p / "config.json").is_file() or (p.suffix == ".gguf" and p.is_file()):
    return str(p)
  if not p.exists():
    raise CheckpointError(f"{p}: no such checkpoint folder")
  if p.name.isdigit() and p.parent.name == "checkpoints":
    p, step = p.parent.parent, int(p.name)
  if not (p / "experiment.json").is_file():
    raise CheckpointError(
      f"{p}: not a checkpoint (no config.json of an HF folder, no experiment.json of a run)"
    )
  n = pick_step(p, step)
  dest = p / "export" / f"step-{n}"
  if not (dest / "agentrl_export.json").is_file():
    export(p, dest, n)
  return str(dest)
