"""Train-inference mismatch of finished episodes: engine behaviour log-probs vs the trainer's.

    stats = score(model_cfg, params, segments)   # envs.agents.agent.Segment rows of policy episodes
    stats == {"tokens": 1760, "mean": 6e-6, "max": 4.3e-5, "kl": 1e-11}

The trainer side is the model's full forward (models.transformer.apply, as the update step
runs it: fp32 params, the model config's compute dtype) over each segment's tokens, turned into
the distribution the engine sampled from (models.sampling.log_probs: temperature, top-k/top-p;
the RL loop samples at temperature 1 without filters); the engine side is what the engine
recorded while sampling (`Segment.logprobs` where `loss_mask` is 1), whatever its tier
(`EngineConfig.dtype / weight_dtype / kv_dtype`). Per token d = log pi - log mu:
`mean` and `max` of |d|, `kl` the mean k3 estimate of KL(mu || pi) (rl.losses.mismatch), the
same numbers an RL step logs as `train/mismatch_*`. `launch.eval` reports them per tier.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from models import sampling, transformer
from rl import losses
from rl.config import LossConfig

ROW_MULTIPLE = 128  # segments are padded to a multiple of this: one compile per bucket


@functools.partial(jax.jit, static_argnames=("model_cfg",))
def _logprobs(params, tokens_BT, seg_BT, slot, model_cfg):
  """log p(tokens[t] | tokens[:t]) under the distribution the engine samples from (entry 0: 0)."""
  pos_BT = jnp.broadcast_to(jnp.arange(tokens_BT.shape[1], dtype=jnp.int32), tokens_BT.shape)
  logits_BTV = transformer.apply(
    params, tokens_BT, model_cfg, positions_BT=pos_BT, segment_ids_BT=seg_BT
  )
  logp_TV = sampling.log_probs(logits_BTV[0, :-1], slot)
  logp_T = jnp.take_along_axis(logp_TV, tokens_BT[0, 1:, None], axis=-1)[:, 0]
  return jnp.pad(logp_T, (1, 0))


def token_deltas(model_cfg, params, segments, sampling_params=None) -> np.ndarray:
  """log pi - log mu at every policy token of `segments`, in order (float64).

  sampling_params: how the engine sampled (models.sampling.SamplingParams; default
  temperature 1, no filters): pi is then log_softmax(filter(logits / temperature)), the
  distribution the behaviour log-probs come from.
  """
  sp = sampling_params or sampling.SamplingParams()
  out = []
  for seg in segments:
    mask = np.asarray(seg.loss_mask, bool)
    if not mask.any():
      continue
    n = len(seg.tokens)
    padded = max(n, min(-(-n // ROW_MULTIPLE) * ROW_MULTIPLE, model_cfg.max_seq_len))
    tokens, seg_ids = np.zeros((2, 1, padded), np.int32)
    tokens[0, :n], seg_ids[0, :n] = seg.tokens, 1
    slot = sampling.stack_params([sp] * (padded - 1))
    logp = np.asarray(_logprobs(params, tokens, seg_ids, slot, model_cfg))[:n]
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


def score(model_cfg, params, segments, sampling_params=None) -> dict:
  """summarize(token_deltas(...)): the mismatch of these episodes' policy tokens."""
  return summarize(token_deltas(model_cfg, params, segments, sampling_params))
