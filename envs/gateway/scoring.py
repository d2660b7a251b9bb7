"""Top log-probs of a finished completion: one teacher-forced forward over prompt + completion.

The engine returns only the sampled token's log-prob, so `top_logprobs` re-scores the
sequence with the engine's current weights under the request's own sampling distribution
(models.sampling.log_probs: temperature and top-p applied). Lengths are padded to power-of-two
buckets so few shapes compile.

Legend: T tokens (bucket), V vocabulary, K top alternatives.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from models import sampling as smp
from models import transformer as tfm


@functools.partial(jax.jit, static_argnames=("cfg", "k"))
def _top(params, tokens_1T, sampling, *, cfg, k: int):
  logits_TV = tfm.apply(params, tokens_1T, cfg)[0]
  T = logits_TV.shape[0]
  rows = jax.tree.map(lambda a: jnp.broadcast_to(a, (T,)), sampling)
  logp_TV = smp.log_probs(logits_TV, rows)
  top_TK, ids_TK = jax.lax.top_k(logp_TV, k)
  return top_TK, ids_TK.astype(jnp.int32)


def top_logprobs(params, cfg, prompt, completion, sampling: smp.SamplingParams, k: int):
  """[(token ids, log-probs)] of the k most likely tokens at each completion position."""
  tokens = list(prompt) + list(completion)
  T = 16
  while T < len(tokens):
    T *= 2
  tokens_1T = np.zeros((1, T), np.int32)
  tokens_1T[0, : len(tokens)] = tokens
  row = jax.tree.map(lambda a: jnp.asarray(a[0]), smp.stack_params([sampling]))
  top_TK, ids_TK = _top(params, jnp.asarray(tokens_1T), row, cfg=cfg, k=k)
  top_TK, ids_TK = np.asarray(top_TK), np.asarray(ids_TK)
  # The logits at position i predict token i + 1: completion token j sits at len(prompt) + j.
  pos = [len(prompt) - 1 + j for j in range(len(completion))]
  return [(ids_TK[p].tolist(), top_TK[p].tolist()) for p in pos]
