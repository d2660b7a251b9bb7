"""configs/smollm2.py end to end at tiny size: a 1-step warm start on markdown-bash
demonstrations, then 2 GRPO steps at temperature 0.7 on the mixed pool in real bwrap sandboxes
graded by the real verifier, and what a researcher watches (per-family rates, mismatch, episode
table, plots)."""

import jax
import numpy as np
import pytest

from configs import smollm2
from rl import config as rl_config
from rl.runtime import run as rl_run
from rl.runtime.telemetry import read_metrics


@pytest.fixture(autouse=True)
def _compile_cache(tmp_path_factory):
  """Restored after: the setting is process-global."""
  before = jax.config.jax_compilation_cache_dir
  jax.config.update("jax_compilation_cache_dir", str(tmp_path_factory.getbasetemp() / "jax_cache"))
  yield
  jax.config.update("jax_compilation_cache_dir", before)


def tiny_config():
  """The config with a tiny fp32 byte-level model in place of SmolLM2, and 2 steps."""
  c = smollm2.get_config()
  c.checkpoint, c.tokenizer = "", "byte"
  m = c.model
  m.arch, m.vocab_size, m.d_model, m.n_layers = "qwen3", 260, 32, 2
  m.n_heads, m.n_kv_heads, m.head_dim, m.d_ff = 4, 2, 8, 64
  m.max_seq_len, m.qk_norm, m.tie_embeddings = 512, True, True
  m.dtype, m.param_dtype, m.attention, m.remat = "float32", "float32", "naive", "none"
  c.env.eval_tasks, c.env.train_pool_size = 1, 2
  # The few-shot prompt is ~1300 bytes: 8x the rows and compile time of a short one
  # (its selection is tested in test_configs_smollm2_tasks.py).
  c.env.system_prompt = "Reply with one ```bash block."
  # 128 bytes: room for the demonstrations' replies (a reply is cut at max_new_tokens)
  c.agent.max_turns, c.agent.max_new_tokens, c.agent.max_episode_tokens = 1, 128, 128
  c.agent.max_context_tokens = 512
  c.engine.max_seq_len = 512
  c.loop.steps, c.loop.eval_every, c.loop.checkpoint_every = 2, 0, 2
  c.loop.row_len = 512
  c.sft.steps, c.sft.demos, c.sft.batch_size = 1, 4, 4  # the warm start path, once
  c.rollout.dynamic_sampling = False  # a random model passes nothing: no drops and re-runs
  c.train.optim.decay_steps = 2
  return c


def test_two_step_smollm2_config_on_a_tiny_model(tmp_path, capsys):
  exp = rl_config.to_experiment(tiny_config())
  assert exp.agent.protocol == "markdown_bash" and exp.env.tasks.startswith("mixed:")
  summary = rl_run.run(exp, str(tmp_path))
  assert summary["step"] == 2
  recs = read_metrics(tmp_path)
  steps = {r["step"]: r for r in recs}
  fams = set(smollm2.FAMILIES.split(",")) | {"core"}
  for s in (1, 2):
    r = steps[s]
    seen = {k.split("/", 1)[1] for k in r if k.startswith("family/")}
    assert seen and seen <= fams, seen  # 2 groups a step: two families (or core) each step
    rate = np.mean([r[f"family/{f}"] for f in seen])
    assert 0.0 <= rate <= 1.0
    for k in ("episode/generated_tokens", "episode/turns", "train/entropy", "train/mismatch_kl"):
      assert k in r, k
  assert exp.agent.temperature == 0.7  # the one owner: rollouts sample at it, the loss scores
  assert any(
    "sft/nll" in r for r in read_metrics(tmp_path, "sft_step")
  )  # the warm start ran on markdown-bash demos
  # Step 1 is on-policy and fp32: the engine's and the trainer's log-probs (both of the logits
  # at temperature 0.7) agree.
  assert steps[1]["train/mismatch_max"] <= 1e-5
  evals = [r for r in recs if "eval/n" in r]
  assert evals and evals[-1]["eval/n"] == len(fams) - 1  # one held-out task per family
  assert any(k.startswith("eval/family/") for k in evals[-1])
  out = capsys.readouterr()
  assert (out.out + out.err).count("sampled episodes") == 2
  assert "| task | instruction | actions | turns | reward |" in out.out + out.err
  assert (tmp_path / "plots" / "watch.png").stat().st_size > 0
  tb = b"".join(p.read_bytes() for p in (tmp_path / "tb").rglob("events*"))
  assert b"episodes" in tb and b"sampled episodes" in tb
