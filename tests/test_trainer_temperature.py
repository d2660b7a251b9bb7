"""One owner for the sampling temperature: `agent.temperature` alone sets both the distribution
the rollouts sample from and the one the update step scores (a real toy run: sandboxes,
verifier, engine, orbax)."""

import types

import numpy as np

from configs import toy
from models.sampling import SamplingParams
from rl import config as rl_config
from rl.runtime import export, mismatch
from rl.runtime import run as rl_run
from rl.runtime.telemetry import read_metrics
from rl.runtime.trajectory_store import TrajectoryStore

TEMPERATURE = 0.5


def test_agent_temperature_reaches_rollouts_and_loss(tmp_path):
  c = toy.get_config()
  c.agent.temperature = TEMPERATURE  # the one setting: nothing on the loss side to match
  c.sft.steps, c.loop.steps, c.loop.checkpoint_every = 0, 1, 1
  c.loop.batch_groups, c.rollout.max_concurrency = 2, 8
  c.train.optim.lr = 0.0  # the checkpoint holds exactly the weights the engine sampled with
  exp = rl_config.to_experiment(c)
  assert rl_run.run(exp, str(tmp_path))["step"] == 1
  # Loss side: step 1 is on-policy and fp32, so the trainer's log-probs equal the engine's
  # behaviour log-probs only if it divides the logits by the temperature the engine used.
  (rec,) = [r for r in read_metrics(tmp_path) if "train/mismatch_max" in r]
  assert rec["train/mismatch_max"] <= 1e-4, rec
  # Rollout side: the recorded behaviour log-probs are those of softmax(logits / 0.5), not of
  # the untempered softmax (were the setting lost on both sides, the check above would pass).
  model_cfg, params, _ = export.load_params(tmp_path, 1)
  rows = TrajectoryStore(tmp_path).read(["tokens", "loss_mask", "logprobs"]).to_pylist()
  segments = [types.SimpleNamespace(**r) for r in rows]
  at = lambda t: np.abs(mismatch.token_deltas(model_cfg, params, segments, SamplingParams(t)))
  assert at(TEMPERATURE).size > 0 and at(TEMPERATURE).max() <= 1e-4
  assert at(1.0).mean() > 1e-2
