"""Speculative decoding with a small draft model (Leviathan et al. / Chen et al. 2023).

Each round the draft proposes k tokens; the target scores all of them in one forward pass;
greedy rows accept the longest prefix that matches the target's argmax and then take the
target's own token, so the output is exactly the target's greedy output. Sampled rows accept
draft token x with probability min(1, p(x)/q(x)) and on rejection draw from
norm(max(0, p - q)), which makes every emitted token a sample of the target's (temperature /
top-k / top-p filtered) distribution p. Logprobs returned are log p of the emitted tokens.

The whole generation is one jitted `while_loop`: a round is k draft steps, one (k+1)-token
target forward and the acceptance, all on device. When every row is greedy (checked on the
host) no distribution or random draw is computed at all. Both models run on per-layer weights
(models.inference.engine.unstack_layers, done once per call) and keep dense per-layer caches, keys
d-major, so nothing large is copied inside the loop.

The batch is static (B rows with their own positions). At the start of a round each cache
holds positions 0..n-2 of the accepted sequence (n = its length); the draft's first step
re-feeds positions n-2 and n-1 so a fully accepted round, after which the draft has not seen
its own last proposal, needs no special case.

Legend: B rows, T prompt length / tokens fed, k draft tokens per round, L sequence buffer,
C cache length, K kv heads, G query heads per kv head, d head_dim, V vocab.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from models import sampling as smp
from models import transformer as tfm
from models.config import ModelConfig
from models.inference.engine import unembed, unstack_layers

_NEG = -1e30


def init_cache(cfg: ModelConfig, B: int, C: int):
  """Per layer: keys [B, K, d, C] (d-major for the score matmul) and values [B, K, C, d]."""
  K, d = cfg.n_kv_heads, cfg.head_dim
  return tuple(
    (jnp.zeros((B, K, d, C), jnp.float32), jnp.zeros((B, K, C, d), jnp.float32))
    for _ in range(cfg.n_layers)
  )


def cached_attend(q_BTHd, kT_BKdC, v_BKCd, pos_BT):
  """Queries at pos_BT over a dense cache whose entry c holds position c (c <= pos visible)."""
  B, T, H, d = q_BTHd.shape
  K, C = kT_BKdC.shape[1], kT_BKdC.shape[3]
  q = q_BTHd.reshape(B, T, K, H // K, d).transpose(0, 2, 3, 1, 4).astype(jnp.float32)
  s_BKGTC = jnp.einsum("bkgtd,bkdc->bkgtc", q * d**-0.5, kT_BKdC)
  visible = jnp.arange(C)[None, None, None, None, :] <= pos_BT[:, None, None, :, None]
  p_BKGTC = jax.nn.softmax(jnp.where(visible, s_BKGTC, _NEG), axis=-1)
  o = jnp.einsum("bkgtc,bkcd->bkgtd", p_BKGTC, v_BKCd)
  return o.transpose(0, 3, 1, 2, 4).reshape(B, T, H, d).astype(q_BTHd.dtype)


def forward_cached(params, cfg: ModelConfig, cache, tokens_BT, pos_BT, *, last_only=False):
  """Runs tokens at per-row positions against the cache; returns (logits_BTV, cache).

  params are in the engine's run layout (unstack_layers); last_only keeps the last position.
  Positions outside the cache are not written.
  """
  rows_B1 = jnp.arange(tokens_BT.shape[0])[:, None]
  x = tfm.embed(params, tokens_BT, cfg)
  out = []
  for lp, (kc, vc) in zip(params["layers"], cache, strict=True):
    q, k, v = tfm.layer_qkv(lp, x, pos_BT, cfg)
    kc = kc.at[rows_B1, :, :, pos_BT].set(k.astype(kc.dtype), mode="drop")  # [B, T, K, d]
    vc = vc.at[rows_B1, :, pos_BT].set(v.astype(vc.dtype), mode="drop")
    x, _ = tfm.layer_finish(lp, x, cached_attend(q, kc, vc, pos_BT), cfg)
    out.append((kc, vc))
  return unembed(params, x[:, -1:] if last_only else x, cfg), tuple(out)


def _keys(seed_B, n_B, salt):
  return jax.vmap(
    lambda s, n: jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(s), n), salt)
  )(seed_B, n_B)


def _draft_round(params, cfg, cache, seq_BL, n_B, sampling, k, greedy):
  """k draft proposals per row: tokens [B, k] and their log q [B, k, V] (None if greedy)."""
  pos_B2 = jnp.maximum(n_B[:, None] + jnp.array([[-2, -1]]), 0)
  toks_B2 = jnp.take_along_axis(seq_BL, pos_B2, axis=1)
  logits, cache = forward_cached(params, cfg, cache, toks_B2, pos_B2, last_only=True)
  props, logqs = [], []
  for j in range(k):
    last_BV = logits[:, -1]
    tok_B = jnp.argmax(last_BV, -1).astype(jnp.int32)
    if not greedy:
      logq_BV = smp.log_probs(last_BV, sampling)
      drawn_B = jax.vmap(jax.random.categorical)(_keys(sampling.seed_B, n_B + j, 1), logq_BV)
      tok_B = jnp.where(sampling.greedy_B, tok_B, drawn_B).astype(jnp.int32)
      logqs.append(logq_BV)
    props.append(tok_B)
    if j + 1 < k:
      logits, cache = forward_cached(params, cfg, cache, tok_B[:, None], (n_B + j)[:, None])
  return jnp.stack(props, 1), (jnp.stack(logqs, 1) if logqs else None), cache


def _verify_greedy(logits_BkV, props_Bk):
  """Accepted count a_B and the k+1 candidates (the target's argmax) with their log p."""
  k = props_Bk.shape[1]
  best_Bk1 = jnp.argmax(logits_BkV, -1).astype(jnp.int32)
  a_B = jnp.sum(jnp.cumprod((props_Bk == best_Bk1[:, :k]).astype(jnp.int32), axis=1), axis=1)
  logp = jnp.max(logits_BkV, -1) - jax.nn.logsumexp(logits_BkV, -1)
  return a_B, best_Bk1, logp


def _verify(logits_BkV, props_Bk, logq_BkV, sampling, n_B):
  """Accepted count a_B and the k+1 candidate tokens (props[:a] + correction) with log p."""
  B, k1, V = logits_BkV.shape
  k = k1 - 1
  logp_BkV = jax.vmap(lambda lg: smp.log_probs(lg, sampling), in_axes=1, out_axes=1)(logits_BkV)
  greedy_B = sampling.greedy_B
  lp_prop = jnp.take_along_axis(logp_BkV[:, :k], props_Bk[..., None], -1)[..., 0]
  lq_prop = jnp.take_along_axis(logq_BkV, props_Bk[..., None], -1)[..., 0]
  u_Bk = jax.vmap(lambda key: jax.random.uniform(key, (k,)))(_keys(sampling.seed_B, n_B, 2))
  ok_sampled = jnp.log(u_Bk) < lp_prop - lq_prop
  ok_greedy = props_Bk == jnp.argmax(logits_BkV[:, :k], -1)
  ok_Bk = jnp.where(greedy_B[:, None], ok_greedy, ok_sampled)
  a_B = jnp.sum(jnp.cumprod(ok_Bk.astype(jnp.int32), axis=1), axis=1)
  # Correction token at index a: residual max(0, p - q) after a rejection, p itself after all k.
  p_a = jnp.take_along_axis(logp_BkV, a_B[:, None, None], 1)[:, 0]
  q_a = jnp.take_along_axis(
    jnp.concatenate([logq_BkV, jnp.full((B, 1, V), -jnp.inf)], 1), a_B[:, None, None], 1
  )[:, 0]
  resid_BV = jnp.maximum(jnp.exp(p_a) - jnp.exp(q_a), 0.0)
  resid_BV = jnp.where(jnp.sum(resid_BV, -1, keepdims=True) > 0, resid_BV, jnp.exp(p_a))
  drawn_B = jax.vmap(jax.random.categorical)(_keys(sampling.seed_B, n_B, 3), jnp.log(resid_BV))
  greedy_tok = jnp.take_along_axis(jnp.argmax(logits_BkV, -1), a_B[:, None], 1)[:, 0]
  fix_B = jnp.where(greedy_B, greedy_tok, drawn_B).astype(jnp.int32)
  cand_Bk1 = jnp.concatenate([props_Bk, jnp.zeros((B, 1), jnp.int32)], 1)
  cand_Bk1 = jnp.where(jnp.arange(k1)[None] == a_B[:, None], fix_B[:, None], cand_Bk1)
  logp_cand = jnp.take_along_axis(logp_BkV, cand_Bk1[..., None], -1)[..., 0]
  return a_B, cand_Bk1, logp_cand


def _run_params(params):
  return params if isinstance(params["layers"], tuple) else unstack_layers(params)


@functools.partial(jax.jit, static_argnames=("target_cfg", "draft_cfg", "max_new", "k", "greedy"))
def _generate(target_params, draft_params, prompt_BT, sampling, *, target_cfg, draft_cfg,
              max_new, k, greedy):  # fmt: skip
  B, T = prompt_BT.shape
  target_params, draft_params = _run_params(target_params), _run_params(draft_params)
  L = T + max_new + k + 1
  seq_BL = jnp.zeros((B, L), jnp.int32).at[:, :T].set(prompt_BT)
  lp_BL = jnp.zeros((B, L), jnp.float32)
  pos_BT = jnp.broadcast_to(jnp.arange(T - 1, dtype=jnp.int32), (B, T - 1))
  _, tcache = forward_cached(
    target_params,
    target_cfg,
    init_cache(target_cfg, B, L),
    prompt_BT[:, :-1],
    pos_BT,
    last_only=True,
  )
  _, dcache = forward_cached(
    draft_params, draft_cfg, init_cache(draft_cfg, B, L), prompt_BT[:, :-1], pos_BT, last_only=True
  )
  n_B = jnp.full((B,), T, jnp.int32)

  def round_(c):
    seq_BL, lp_BL, n_B, tcache, dcache, rounds, acc_B = c
    props, logq, dcache = _draft_round(
      draft_params, draft_cfg, dcache, seq_BL, n_B, sampling, k, greedy
    )
    feed = jnp.concatenate([jnp.take_along_axis(seq_BL, (n_B - 1)[:, None], 1), props], 1)
    pos = n_B[:, None] - 1 + jnp.arange(k + 1)[None]
    logits, tcache = forward_cached(target_params, target_cfg, tcache, feed, pos)
    if greedy:
      a_B, cand, logp = _verify_greedy(logits, props)
    else:
      a_B, cand, logp = _verify(logits, props, logq, sampling, n_B)
    done_B = n_B >= T + max_new
    write_pos = jnp.where(done_B[:, None], L, n_B[:, None] + jnp.arange(k + 1)[None])
    keep = jnp.arange(k + 1)[None] <= a_B[:, None]
    write_pos = jnp.where(keep, write_pos, L)  # L is out of range: dropped
    rows = jnp.arange(B)[:, None]
    seq_BL = seq_BL.at[rows, write_pos].set(cand, mode="drop")
    lp_BL = lp_BL.at[rows, write_pos].set(logp, mode="drop")
    n_B = jnp.where(done_B, n_B, n_B + a_B + 1)
    acc_B = acc_B + jnp.where(done_B, 0, a_B)
    return seq_BL, lp_BL, n_B, tcache, dcache, rounds + jnp.where(done_B, 0, 1), acc_B

  zeros_B = jnp.zeros((B,), jnp.int32)
  init = (seq_BL, lp_BL, n_B, tcache, dcache, zeros_B, zeros_B)
  seq_BL, lp_BL, n_B, _, _, rounds_B, acc_B = jax.lax.while_loop(
    lambda c: jnp.any(c[2] < T + max_new), round_, init
  )
  stats = {"rounds": rounds_B, "accepted": acc_B}
  return seq_BL[:, T : T + max_new], lp_BL[:, T : T + max_new], stats


def generate(target_params, draft_params, prompt_BT, sampling: smp.SlotSampling, *,
             target_cfg: ModelConfig, draft_cfg: ModelConfig, max_new: int, k: int = 4):  # fmt: skip
  """Speculative decoding of B equal-length prompts (params stacked or in run layout).

  Returns (tokens [B, max_new], logprobs [B, max_new], stats) where stats holds the number of
  rounds and of accepted draft tokens (agreement = accepted / (rounds * k) per row).
  """
  if prompt_BT.shape[1] < 2:
    raise ValueError("speculative.generate needs prompts of at least 2 tokens")
  greedy = bool(np.all(np.asarray(sampling.greedy_B)))
  return _generate(
    target_params, draft_params, prompt_BT, sampling, target_cfg=target_cfg,
    draft_cfg=draft_cfg, max_new=max_new, k=k, greedy=greedy,
  )  # fmt: skip
