"""A toy RL run with LoRA end to end (real sandboxes, verifier, engine, orbax): the trainer
updates adapters over a frozen base and the engine samples from the merged weights."""

import jax
import numpy as np
import pytest

from configs import toy
from models.io import hf, peft_io
from rl import config as rl_config
from rl.runtime import export
from rl.runtime import run as rl_run
from rl.runtime.telemetry import read_metrics


@pytest.fixture(autouse=True)
def _compile_cache(tmp_path_factory):
  """Restored after: the setting is process-global."""
  before = jax.config.jax_compilation_cache_dir
  jax.config.update("jax_compilation_cache_dir", str(tmp_path_factory.getbasetemp() / "jax_cache"))
  yield
  jax.config.update("jax_compilation_cache_dir", before)


def test_lora_toy_run(tmp_path):
  c = toy.get_config()
  c.train.lora.rank, c.train.lora.alpha = 8, 16.0
  c.train.lora.targets = ("all-linear",)
  c.train.optim.lr = 1e-2
  # The toy's full fine-tuning warm start runs first; RL then trains adapters over its weights.
  c.loop.steps, c.loop.checkpoint_every = 3, 3
  exp = rl_config.to_experiment(c)
  summary = rl_run.run(exp, str(tmp_path))
  assert summary["step"] == 3
  recs = [r for r in read_metrics(tmp_path) if "train/approx_kl" in r]
  assert [r["step"] for r in recs] == [1, 2, 3]
  # Every step after the first update that moved the adapters was sampled by the engine after a
  # weight sync of moved adapters: its merged weights give the trainer's factorised log-probs
  # (an engine left on the base, or on stale weights, would not).
  first = next(i for i, r in enumerate(recs) if r["train/grad_norm"] > 0)
  assert first < 2, recs
  for r in recs[first + 1 :]:
    assert r["train/approx_kl"] < 1e-9 and abs(r["train/ratio_max"] - 1) < 1e-4, r

  # The run's checkpoint exports as merged weights (what launch.eval --checkpoint=WORKDIR and
  # launch.export read), checked against W + (alpha / r) A @ B in NumPy, or as PEFT adapters.
  _, adapters, base = export.load_params(tmp_path, 3)
  assert base is not None and set(adapters) == {"wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"}
  _, merged = hf.load(export.resolve_checkpoint(tmp_path))
  for leaf, ab in adapters.items():
    a, b = np.asarray(ab["a"], np.float64), np.asarray(ab["b"], np.float64)
    L, r = a.shape[0], a.shape[-1]
    d = np.einsum("lir,lro->lio", a.reshape(L, -1, r), b.reshape(L, r, -1))
    want = np.asarray(base["layers"][leaf], np.float64) + (16.0 / 8) * d.reshape(
      merged["layers"][leaf].shape
    )
    np.testing.assert_allclose(merged["layers"][leaf], want, rtol=1e-6, atol=1e-6)
  np.testing.assert_array_equal(merged["embed"], base["embed"])
  out = export.export(tmp_path, tmp_path / "adapters", adapters=True)
  cfg_back, back = peft_io.load_adapters(out, exp.model)
  assert cfg_back.rank == 8 and cfg_back.alpha == 16.0
  for leaf, ab in adapters.items():
    np.testing.assert_array_equal(back[leaf]["a"], ab["a"])
    np.testing.assert_array_equal(back[leaf]["b"], ab["b"])
