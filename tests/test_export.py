"""rl.runtime.export: a run's orbax checkpoint -> HF folder with the same logits; workdir / step
directory / HF folder all resolve; bad paths give one-line CheckpointErrors."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from models import config, transformer
from models.io import hf
from rl.config import Experiment, TrainConfig
from rl.runtime import export
from rl.runtime.checkpoint import Checkpointer
from rl.runtime.run import training_mesh
from rl.train_state import create_train_state

TINY = config.tiny(max_seq_len=64, attention="naive")


def _run_dir(tmp_path):
  """A run directory as training leaves it: experiment.json + orbax checkpoints 1 and 2."""
  wd = tmp_path / "run"
  exp = Experiment(model=TINY, train=TrainConfig())
  (wd).mkdir()
  (wd / "experiment.json").write_text(json.dumps(dataclasses.asdict(exp), default=str))
  mesh = training_mesh(exp)
  ckpt = Checkpointer(wd / "checkpoints", every_steps=1, keep=3)
  states = {}
  for step in (1, 2):
    state, _ = create_train_state(TINY, exp.train, mesh, jax.random.key(step))
    ckpt.save(step, state, {"step": step})
    states[step] = jax.device_get(state.params)
  ckpt.close()
  (wd / "metrics.jsonl").write_text(
    "\n".join(
      json.dumps({"step": s, "eval/pass_rate/overall": r}) for s, r in ((1, 0.5), (2, 0.25))
    )
  )
  return wd, states


def _same_params(a, b):
  """Exact equality, leaf by leaf (save -> load keeps the dtype, so nothing may move)."""
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _logits(cfg, params):
  tokens_BT = np.arange(12, dtype=np.int32).reshape(2, 6)
  return np.asarray(transformer.apply(params, tokens_BT, cfg))


def test_export_round_trip_and_resolution(tmp_path):
  wd, states = _run_dir(tmp_path)
  with pytest.raises(export.CheckpointError, match="--adapters needs a LoRA run"):
    export.export(wd, tmp_path / "peft", adapters=True)
  out = export.export(wd, tmp_path / "hf", step="best")  # best eval: step 1
  assert json.loads((out / "agentrl_export.json").read_text())["step"] == 1
  assert (out / "chat_template.jinja").is_file() and not (out / "tokenizer.json").exists()
  cfg, params = hf.load(out, attention="naive")  # the kernel is a run-time choice
  assert cfg == TINY
  _same_params(params, states[1])
  np.testing.assert_array_equal(_logits(cfg, params), _logits(TINY, states[1]))
  # A run directory resolves to its latest step, exported once under WORKDIR/export.
  latest = export.resolve_checkpoint(wd)
  assert latest == str(wd / "export" / "step-2")
  _same_params(hf.load(latest)[1], states[2])
  assert export.resolve_checkpoint(wd / "checkpoints" / "1") == str(wd / "export" / "step-1")
  assert export.resolve_checkpoint(out) == str(out)  # an HF folder is itself


def test_bad_paths_are_one_line_errors(tmp_path):
  with pytest.raises(export.CheckpointError, match="no such checkpoint folder"):
    export.resolve_checkpoint(tmp_path / "missing")
  with pytest.raises(export.CheckpointError, match="not a checkpoint"):
    export.resolve_checkpoint(tmp_path)
  (tmp_path / "experiment.json").write_text("{}")
  with pytest.raises(export.CheckpointError, match="no checkpoint under"):
    export.resolve_checkpoint(tmp_path)


def test_export_prints_no_orbax_metadata_warning(tmp_path, caplog):
  wd, _ = _run_dir(tmp_path)  # orbax warned once per export that _CHECKPOINT_METADATA was missing
  with caplog.at_level("WARNING"):
    export.export(wd, tmp_path / "hf", step="latest")
  assert [r.getMessage() for r in caplog.records if "METADATA" in r.getMessage()] == []


def test_export_of_a_run_from_a_named_checkpoint(tmp_path):
  """A run that started from `smollm2-135m-instruct` (a name, not a folder) exports with that
  checkpoint's config and tokenizer."""
  name = "smollm2-135m-instruct"
  cfg, params = hf.load(name)
  wd = tmp_path / "run"
  wd.mkdir()
  exp = Experiment(checkpoint=name, tokenizer=name, train=TrainConfig())
  (wd / "experiment.json").write_text(json.dumps(dataclasses.asdict(exp), default=str))
  state, _ = create_train_state(cfg, exp.train, training_mesh(exp), jax.random.key(0), params)
  ckpt = Checkpointer(wd / "checkpoints", every_steps=1, keep=1)
  ckpt.save(0, state, {"step": 0})
  ckpt.close()
  out = export.export(wd, tmp_path / "hf", step="latest")
  cfg2, params2 = hf.load(out)
  assert cfg2 == cfg
  _same_params(params2, params)
  tok, tok2 = hf.load_tokenizer(name), hf.load_tokenizer(out)
  text = "<|im_start|>user\nls -la ~/dir<|im_end|>"
  assert tok2.encode(text) == tok.encode(text)
