"""Train-inference mismatch of finished episodes: engine behaviour log-probs vs the trainer's.

    stats = score(model_cfg, params, segments)   # envs.agent.Segment rows of policy episodes
    stats == {"tokens": 1760, "mean": 6e-6, "max": 4.3e-5, "kl": 1e-11}

The trainer side is the update step's own forward (rl.train_step.forward_logprobs, fp32
params, the model config's compute dtype) over each segment's tokens; the engine side is what
the engine recorded while sampling (`Segment.logprobs` where `loss_mask` is 1), whatever its
tier (`EngineConfig.dtype / weight_dtype / kv_dtype`). Per token d = log pi - log mu:
`mean` and `max` of |d|, `kl` the mean k3 estimate of KL(mu || pi) (rl.losses.mismatch), the
same numbers an RL step logs as `train/mismatch_*`. `launch.eval` reports them per tier.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from rl import losses
from rl.config import LossConfig
from rl.train_step import forward_logprobs

ROW_MULTIPLE = 128  # segments are padded to a multiple of this: one compile per bucket


@functools.partial(jax.jit, static_argnames=("model_cfg",))
def _logprobs(params, tokens_BT, seg_BT, model_cfg):
  pos_BT = jnp.broadcast_to(jnp.arange(tokens_BT.shape[1], dtype=jnp.int32), tokens_BT.shape)
  batch = {"tokens_BT": tokens_BT, "segment_ids_BT": seg_BT, "positions_BT": pos_BT}
  logp_BT, _, _ = forward_logprobs(params, batch, model_cfg, False)
  return logp_BT


def token_deltas(model_cfg, params, segments) -> np.ndarray:
  """log pi - log mu at every policy token of `segments`, in order (float64)."""
  out = []
  for seg in segments:
    mask = np.asarray(seg.loss_mask, bool)
    if not mask.any():
      continue
    n = len(seg.tokens)
    padded = max(n, min(-(-n // ROW_MULTIPLE) * ROW_MULTIPLE, model_cfg.max_seq_len))
    tokens, seg_ids = np.zeros((2, 1, padded), np.int32)
    tokens[0, :n], seg_ids[0, :n] = seg.tokens, 1
    logp = np.asarray(_logprobs(params, tokens, seg_ids, model_cfg))[0, :n]
    behave = np.asarray(seg.logprobs, np.float64)
    out.append(logp[mask].astype(np.float64) - behave[mask])
  return np.concatenate(out) if out else np.zeros(0)


def summarize(delta_N: np.ndarray, clamp: float = LossConfig().log_ratio_clamp) -> dict:
  """mean / max |d| and mean k3 KL over the tokens (rl.losses.mismatch's per-token terms)."""
  if delta_N.size == 0:
    return {"tokens": 0, "mean": None, "max": None, "kl": None}
  d = jnp.asarray(delta_N, jnp.float32)
  tok = losses.mismatch(d, jnp.zeros_like(d), LossConfig(log_ratio_clamp=clamp))
  return {
    "tokens": int(delta_N.size),
    "mean": float(np.abs(delta_N).mean()),
    "max": float(np.abs(delta_N).max()),
    "kl": float(jnp.mean(tok["mismatch_kl"])),
  }


def score(model_cfg, params, segments) -> dict:
  """summarize(token_deltas(...)): the mismatch of these episodes' policy tokens."""
  return summarize(token_deltas(model_cfg, params, segments))
