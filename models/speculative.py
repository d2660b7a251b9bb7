"""Speculative decoding with a small draft model (Leviathan et al. / Chen et al. 2023).

Each round the draft proposes k tokens; the target scores all of them in one forward pass;
greedy rows accept the longest prefix that matches the target's argmax and then take the
target's own token, so the output is exactly the target's greedy output. Sampled rows accept
draft token x with probability min(1, p(x)/q(x)) and on rejection draw from
norm(max(0, p - q)), which makes every emitted token a sample of the target's (temperature /
top-k / top-p filtered) distribution p. Logprobs returned are log p of the emitted tokens.

The batch is static (B rows with their own positions); both models keep dense caches. At the
start of a round each cache holds positions 0..n-2 of the accepted sequence (n = its length);
the draft's first step re-feeds positions n-2 and n-1 so a fully accepted round, after which
the draft has not seen its own last proposal, needs no special case.

Legend: B rows, T prompt length, k draft tokens per round, N max new tokens, L layers,
C cache length, K kv heads, d head_dim, V vocab.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from models import sampling as smp
from models import transformer as tfm
from models.attention import attend
from models.config import ModelConfig


def _cache(cfg: ModelConfig, B: int, C: int):
  shape = (cfg.n_layers, B, C, cfg.n_kv_heads, cfg.head_dim)
  return jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32)


def forward_cached(params, cfg: ModelConfig, cache, tokens_BT, pos_BT):
  """Runs tokens at per-row positions against a dense cache; returns (logits_BTV, cache)."""
  B, T = tokens_BT.shape
  C = cache[0].shape[2]
  rows_B1 = jnp.arange(B)[:, None]
  k_pos_BC = jnp.broadcast_to(jnp.arange(C, dtype=jnp.int32), (B, C))

  def body(carry, xs):
    x, (kc, vc) = carry
    lp, layer = xs
    q, k, v = tfm.layer_qkv(lp, x, pos_BT, cfg)
    kc = kc.at[layer, rows_B1, pos_BT].set(k, mode="drop")
    vc = vc.at[layer, rows_B1, pos_BT].set(v, mode="drop")
    attn = attend(q, kc[layer], vc[layer], q_pos_BT=pos_BT, k_pos_BS=k_pos_BC, impl="naive")
    x, _ = tfm.layer_finish(lp, x, attn, cfg)
    return (x, (kc, vc)), None

  x = tfm.embed(params, tokens_BT, cfg)
  xs = (params["layers"], jnp.arange(cfg.n_layers))
  (x, cache), _ = jax.lax.scan(body, (x, cache), xs)
  return tfm.unembed(params, x, cfg), cache


def _keys(seed_B, n_B, salt):
  return jax.vmap(
    lambda s, n: jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(s), n), salt)
  )(seed_B, n_B)


def _draft_round(params, cfg, cache, seq_BL, n_B, sampling, k):
  """k draft proposals per row: tokens [B, k] and their log q [B, k, V]."""
  pos_B2 = jnp.maximum(n_B[:, None] + jnp.array([[-2, -1]]), 0)
  toks_B2 = jnp.take_along_axis(seq_BL, pos_B2, axis=1)
  logits, cache = forward_cached(params, cfg, cache, toks_B2, pos_B2)
  last_BV, props, logqs = logits[:, -1], [], []
  for j in range(k):
    logq_BV = smp.log_probs(last_BV, sampling)
    drawn_B = jax.vmap(jax.random.categorical)(_keys(sampling.seed_B, n_B + j, 1), logq_BV)
    tok_B = jnp.where(sampling.greedy_B, jnp.argmax(last_BV, -1), drawn_B).astype(jnp.int32)
    props.append(tok_B)
    logqs.append(logq_BV)
    if j + 1 < k:
      logits, cache = forward_cached(params, cfg, cache, tok_B[:, None], (n_B + j)[:, None])
      last_BV = logits[:, 0]
  return jnp.stack(props, 1), jnp.stack(logqs, 1), cache


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


@functools.partial(jax.jit, static_argnames=("target_cfg", "draft_cfg", "max_new", "k"))
def generate(target_params, draft_params, prompt_BT, sampling: smp.SlotSampling, *,
             target_cfg: ModelConfig, draft_cfg: ModelConfig, max_new: int, k: int = 4):  # fmt: skip
  """Speculative decoding of B equal-length prompts.

  Returns (tokens [B, max_new], logprobs [B, max_new], stats) where stats holds the number of
  rounds and of accepted draft tokens (agreement = accepted / (rounds * k) per row).
  """
  B, T = prompt_BT.shape
  if T < 2:
    raise ValueError("speculative.generate needs prompts of at least 2 tokens")
  L = T + max_new + k + 1
  seq_BL = jnp.zeros((B, L), jnp.int32).at[:, :T].set(prompt_BT)
  lp_BL = jnp.zeros((B, L), jnp.float32)
  pos_BT = jnp.broadcast_to(jnp.arange(T - 1, dtype=jnp.int32), (B, T - 1))
  _, tcache = forward_cached(
    target_params, target_cfg, _cache(target_cfg, B, L), prompt_BT[:, :-1], pos_BT
  )
  _, dcache = forward_cached(
    draft_params, draft_cfg, _cache(draft_cfg, B, L), prompt_BT[:, :-1], pos_BT
  )
  n_B = jnp.full((B,), T, jnp.int32)

  def round_(c):
    seq_BL, lp_BL, n_B, tcache, dcache, rounds, acc_B = c
    props, logq, dcache = _draft_round(draft_params, draft_cfg, dcache, seq_BL, n_B, sampling, k)
    feed = jnp.concatenate([jnp.take_along_axis(seq_BL, (n_B - 1)[:, None], 1), props], 1)
    pos = n_B[:, None] - 1 + jnp.arange(k + 1)[None]
    logits, tcache = forward_cached(target_params, target_cfg, tcache, feed, pos)
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

  init = (
    seq_BL,
    lp_BL,
    n_B,
    tcache,
    dcache,
    jnp.zeros((B,), jnp.int32),
    jnp.zeros((B,), jnp.int32),
  )
  seq_BL, lp_BL, n_B, _, _, rounds_B, acc_B = jax.lax.while_loop(
    lambda c: jnp.any(c[2] < T + max_new), round_, init
  )
  stats = {"rounds": rounds_B, "accepted": acc_B}
  return seq_BL[:, T : T + max_new], lp_BL[:, T : T + max_new], stats
