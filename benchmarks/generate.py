"""Decode throughput of the generation engine vs a naive loop and a static while_loop sampler.

Model: the ~20M Qwen3-shaped config (vocab 8192, width 512, 4 layers, GQA 8/2, d_ff 2048),
random weights, fp32, greedy, prompt 64, 128 new tokens. For 1, 8 and 32 concurrent requests
it reports (medians of --repeats runs, all in one process):
  engine      Generator end to end (submit -> all results, prefill included), tokens/s
  static      a jitted prefill + lax.while_loop sampler over a dense cache, one static batch
  naive       a loop recomputing the whole (padded) prefix for every token
  overhead    (engine run - its prefills) / steps / (jitted decode step alone); target <= 1.25
  *_cpu       the same ratio in process CPU time (steadier than wall time on a loaded machine)
  --speculative  batch-1 greedy speedup of speculative decoding over the plain engine, agreement
  --tiers        int8 weights, int8 KV cache, KV eviction: step time and logprob drift
  --peers        the same requests through Tunix 0.1.7's Sampler (its own venv, see
                 benchmarks/peers/) and transformers' generate, each in a child process kept
                 running beside ours: every repeat times ours, then each peer's run, so the
                 ratio engine / peer tokens/s (median over repeats) compares runs seconds apart
Run: python benchmarks/generate.py [--repeats=3] [--concurrency=1,8,32] [--speculative] [--tiers]
     [--peers=tunix,transformers] [--decode_chunk=N]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from anywhere

import jax
import jax.numpy as jnp
import numpy as np

from models import config
from models import sampling as smp  # noqa: E402
from models import transformer as tfm
from models.attention import attend
from models.inference import kv_evict
from models.inference import speculative as spec
from models.inference.engine import Engine, unstack_layers
from models.inference.engine import unembed as eng_unembed
from models.inference.generator import GenerationRequest, Generator
from models.sampling import SamplingParams

PROMPT, NEW = 64, 128


def model():
  cfg = config.qwen3_20m(n_layers=4, d_ff=2048, max_seq_len=PROMPT + NEW)
  return cfg, tfm.init(cfg, jax.random.PRNGKey(0))


# ------------------------------------------------------------------ baselines


@functools.partial(jax.jit, static_argnames=("cfg", "new"))
def static_sampler(run_params, prompt_BT, *, cfg, new):
  """Prefill a static batch into a dense cache, then greedy-decode with lax.while_loop.

  run_params is the engine's run layout (`unstack_layers`: one weight tree per layer, an
  untied [D, V] LM head), so both run the same weight layout; attention is dense over the
  whole cache (masked by position) where the engine attends over its paged buckets.
  """
  B, T = prompt_BT.shape
  max_len = T + new
  pos_BT = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
  cache_pos_BS = jnp.broadcast_to(jnp.arange(max_len, dtype=jnp.int32), (B, max_len))

  def layers(x, cache, pos_BT, write_at):
    out = []
    for lp, (kc, vc) in zip(run_params["layers"], cache, strict=True):  # unrolled, as the engine
      q, k, v = tfm.layer_qkv(lp, x, pos_BT, cfg)
      kc = jax.lax.dynamic_update_slice(kc, k, (0, write_at, 0, 0))
      vc = jax.lax.dynamic_update_slice(vc, v, (0, write_at, 0, 0))
      attn = attend(q, kc, vc, q_pos_BT=pos_BT, k_pos_BS=cache_pos_BS, impl="naive")
      x, _ = tfm.layer_finish(lp, x, attn, cfg)
      out.append((kc, vc))
    return x, tuple(out)

  shape = (B, max_len, cfg.n_kv_heads, cfg.head_dim)
  cache = tuple(
    (jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32)) for _ in range(cfg.n_layers)
  )
  x, cache = layers(tfm.embed(run_params, prompt_BT, cfg), cache, pos_BT, 0)
  tok_B = jnp.argmax(eng_unembed(run_params, x[:, -1:], cfg)[:, 0], axis=-1).astype(jnp.int32)
  out_BN = jnp.zeros((B, new), jnp.int32).at[:, 0].set(tok_B)

  def cond(c):
    return c[0] < new

  def step(c):
    i, tok_B, cache, out_BN = c
    pos = T + i - 1
    x = tfm.embed(run_params, tok_B[:, None], cfg)
    x, cache = layers(x, cache, jnp.full((B, 1), pos, jnp.int32), pos)
    tok_B = jnp.argmax(eng_unembed(run_params, x, cfg)[:, 0], axis=-1).astype(jnp.int32)
    return i + 1, tok_B, cache, out_BN.at[:, i].set(tok_B)

  return jax.lax.while_loop(cond, step, (jnp.int32(1), tok_B, cache, out_BN))[3]


def naive_loop(params, cfg, prompts_BT, new):
  """Recomputes the full padded sequence for every token (one compiled shape)."""
  B, T = prompts_BT.shape
  fwd = jax.jit(lambda p, t: tfm.apply(p, t, cfg))
  seq = np.zeros((B, T + NEW), np.int32)
  seq[:, :T] = prompts_BT
  for i in range(new):
    logits = fwd(params, jnp.asarray(seq))
    seq[:, T + i] = np.asarray(jnp.argmax(logits[:, T + i - 1], axis=-1))
  return seq[:, T : T + new]


# ------------------------------------------------------------------ measurements


def timed(fn, repeats):
  times = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    out = fn()
    jax.block_until_ready(out)
    times.append(time.perf_counter() - t0)
  return statistics.median(times), out


def wall_cpu(fn):
  """(wall seconds, this process's CPU seconds) of one call; CPU time is steadier under load."""
  t0, c0 = time.perf_counter(), time.process_time()
  jax.block_until_ready(fn())
  return time.perf_counter() - t0, time.process_time() - c0


def bench_concurrency(cfg, params, c, repeats, naive_tokens, peer_procs=None, gen_kw=None):
  rng = np.random.default_rng(c)
  prompts = rng.integers(0, cfg.vocab_size, size=(c, PROMPT)).astype(np.int32)
  eng = Engine(cfg, params, max_concurrent_decodes=c, page_size=16, max_seq_len=PROMPT + NEW)
  reqs = [GenerationRequest([int(t) for t in p], NEW, SamplingParams(greedy=True)) for p in prompts]
  gen = Generator(eng, **(gen_kw or {}))
  state = eng.init_decode_state()  # a second state for the step-alone and prefill timings
  table = np.arange(1, c * eng.pages_per_slot + 1).reshape(c, -1)
  state = eng.set_page_table(state, table)

  # The jitted decode step alone, back to back, all slots busy, attending over the same page
  # buckets as the Generator's steps (positions PROMPT .. PROMPT + NEW - 2).
  buckets = [eng.attention_pages(PROMPT + i + 1) for i in range(NEW - 1)]

  def steps_alone(n=NEW - 1):
    nonlocal state
    for pages in buckets[:n]:
      state, out = eng.generate(decode_state=state, pages=pages)
    return out

  def prefills(batch=16):  # as the Generator batches them (max_prefill_batch=16)
    nonlocal state
    for i in range(0, c, batch):
      rows = slice(i, i + batch)
      prefix = eng.prefill(padded_tokens=prompts[rows], true_length=PROMPT)
      state = eng.insert(prefix, state, np.arange(c)[rows], table[rows])
    return state.tokens_S

  jp, run_params = jnp.asarray(prompts), unstack_layers(params)
  static = lambda: static_sampler(run_params, jp, cfg=cfg, new=NEW)
  results, _, _, static_out = gen.generate(reqs), steps_alone(), prefills(), static()  # compile
  # Interleaved repeats: the shared machine's load drifts, so each ratio compares runs made
  # seconds apart and the medians of per-repeat figures are reported.
  rows, cpu_ratios, peer_runs = [], [], {name: [] for name in peer_procs or {}}
  for _ in range(repeats):
    steps0 = gen.stats()["decode_steps"]
    t_engine, cpu_engine = wall_cpu(lambda: gen.generate(reqs))
    steps = gen.stats()["decode_steps"] - steps0
    for name, peer in (peer_procs or {}).items():  # right after ours: the same machine load
      peer_runs[name].append((t_engine, cpu_engine, peer.run(c)))
    t_prefill = timed(prefills, 1)[0]
    t_step = timed(steps_alone, 1)[0] / (NEW - 1)
    t_static, cpu_static = wall_cpu(static)
    rows.append((t_engine, t_prefill, t_step, t_static, steps))
    cpu_ratios.append(cpu_static / cpu_engine)
  gen.close()
  med = lambda f: statistics.median(f(*r) for r in rows)
  t_engine, t_prefill = med(lambda e, p, s, st, n: e), med(lambda e, p, s, st, n: p)
  t_step, t_static = med(lambda e, p, s, st, n: s), med(lambda e, p, s, st, n: st)
  naive_loop(params, cfg, prompts, 1)
  t_naive, naive_out = timed(lambda: naive_loop(params, cfg, prompts, naive_tokens), 1)

  same_static = all(
    r.tokens == list(map(int, s)) for r, s in zip(results, np.asarray(static_out), strict=True)
  )
  same_naive = all(
    r.tokens[:naive_tokens] == list(map(int, s)) for r, s in zip(results, naive_out, strict=True)
  )
  tok = c * NEW
  vs_peers = {
    f"engine_vs_{name}": dict(
      ratio=statistics.median(r["wall_s"] / e for e, _, r in runs),
      ratio_cpu=statistics.median(r["cpu_s"] / ce for _, ce, r in runs),
      peer_tok_s=statistics.median(r["tok_s"] for *_, r in runs),
      peer_load_avg_1min=runs[-1][2]["load_average"][0],
    )
    for name, runs in peer_runs.items()
  }
  return dict(
    concurrency=c,
    engine_tok_s=tok / t_engine,
    engine_decode_only_tok_s=tok / max(t_engine - t_prefill, 1e-9),
    static_tok_s=tok / t_static,
    naive_tok_s=c * naive_tokens / t_naive,
    engine_vs_static=med(lambda e, p, s, st, n: st / e),
    engine_vs_static_cpu=statistics.median(cpu_ratios),
    engine_vs_naive=(tok / t_engine) / (c * naive_tokens / t_naive),
    step_ms=1e3 * t_step,
    engine_step_ms=1e3 * med(lambda e, p, s, st, n: (e - p) / n),
    overhead=med(lambda e, p, s, st, n: (e - p) / n / s),
    prefill_ms=1e3 * t_prefill,
    same_tokens_as_static=same_static,
    same_tokens_as_naive=same_naive,
    load_avg_1min=os.getloadavg()[0],
    **vs_peers,
  )


def bench_speculative(cfg, params, repeats, ks=(4, 6, 8)):
  """Batch-1 greedy: the plain engine (Generator, one slot) vs speculative decoding, same run.

  Target: the benchmark's random-weight model. Draft (`tiny`): a 1-layer, width-128 Qwen3
  with its own random tied embedding, 1.2M parameters (6% of the target's weights). A random
  tied-embedding model's greedy continuation mostly repeats its last token (the target does so
  for `target_repeat_rate` of its tokens), and so does the tiny draft: that is where its
  agreement comes from. Distilling it from the target (300 steps on the target's greedy
  continuations, or on random contexts) lowered agreement to 0-3% (it memorises the few
  continuations / cannot fit a random network's outputs), so the draft is used untrained.
  `layer_skip` is the target's first layer with the shared embedding and head (40% of the
  target's weights) for contrast. Agreement (accepted / proposed) is measured, not assumed.
  verify_cost is the target's (k+1)-token forward over its 1-token forward: XLA:CPU runs 1-row
  matmuls as GEMV and >= 2 rows as GEMM, which costs ~2x, so a round of k draft steps (cost c
  each, in target steps) emits a*k + 1 tokens for about k*c + 2 target steps.
  """
  dcfg = config.qwen3_20m(
    n_layers=1, d_model=128, n_heads=2, n_kv_heads=1, d_ff=256, max_seq_len=cfg.max_seq_len
  )
  drafts = {
    "tiny": (dcfg, tfm.init(dcfg, jax.random.PRNGKey(1))),
    "layer_skip": (
      cfg.replace(n_layers=1),
      dict(params, layers=jax.tree.map(lambda a: a[:1], params["layers"])),
    ),
  }
  prompt = np.random.default_rng(0).integers(0, cfg.vocab_size, (1, PROMPT)).astype(np.int32)
  rows = jax.tree.map(jnp.asarray, smp.stack_params([SamplingParams(greedy=True)]))
  eng = Engine(cfg, params, max_concurrent_decodes=1, page_size=16, max_seq_len=PROMPT + NEW)
  req = GenerationRequest([int(t) for t in prompt[0]], NEW, SamplingParams(greedy=True))
  run_params = unstack_layers(params)
  with Generator(eng) as gen:
    plain = gen.generate([req])[0].tokens
    repeat_rate = float(np.mean(np.array(plain[1:]) == np.array(plain[:-1])))
    out = []
    for name, (dc, dp) in drafts.items():
      dp = unstack_layers(dp)
      for k in ks:
        run = lambda k=k, dc=dc, dp=dp: spec.generate(
          run_params, dp, jnp.asarray(prompt), rows, target_cfg=cfg, draft_cfg=dc,
          max_new=NEW, k=k,
        )  # fmt: skip
        row, _ = speculative_vs_plain(gen, req, run, k, repeats)
        out.append(dict(draft=name, k=k, **row, target_repeat_rate=repeat_rate))
  out.append(_verify_cost(cfg, run_params, repeats, ks))
  return out


def speculative_vs_plain(gen, req, run, k: int, repeats: int) -> tuple[dict, list[int]]:
  """Batch-1 greedy `req` on the plain engine (`gen`) vs `run()` (a spec.generate call for the
  same prompt), in interleaved repeats; returns (figures, the plain engine's tokens)."""
  plain = gen.generate([req])[0].tokens
  toks, _, stats = jax.block_until_ready(run())
  pairs = [(wall_cpu(lambda: gen.generate([req])), wall_cpu(run)) for _ in range(repeats)]
  t_plain = statistics.median(p[0] for p, _ in pairs)
  t_spec = statistics.median(s[0] for _, s in pairs)
  row = dict(
    plain_engine_tok_s=NEW / t_plain,
    speculative_tok_s=NEW / t_spec,
    speedup=statistics.median(p[0] / s[0] for p, s in pairs),
    speedup_cpu=statistics.median(p[1] / s[1] for p, s in pairs),
    agreement=float(stats["accepted"][0]) / (float(stats["rounds"][0]) * k),
    identical_greedy=list(map(int, toks[0])) == plain,
  )
  return row, plain


def _verify_cost(cfg, run_params, repeats, ks, n=16):
  """Target forward of k+1 tokens / of 1 token (dense cache, batch 1), per k."""
  fwd = jax.jit(
    lambda c, t, pos: spec.forward_cached(run_params, cfg, c, t, pos), donate_argnums=(0,)
  )
  cache = spec.init_cache(cfg, 1, PROMPT + NEW + max(ks) + 1)

  def per_call(T):
    nonlocal cache
    t, pos = jnp.zeros((1, T), jnp.int32), jnp.arange(PROMPT, PROMPT + T)[None]

    def go():
      nonlocal cache
      for _ in range(n):
        logits, cache = fwd(cache, t, pos)
      return logits

    go()
    return timed(go, repeats)[0] / n

  t1 = per_call(1)
  return dict(
    target_fwd_1tok_ms=1e3 * t1, **{f"verify_cost_k{k}": per_call(k + 1) / t1 for k in ks}
  )


def _decode_step_ms(eng, repeats, n=16):
  state = eng.init_decode_state()
  table = np.arange(1, eng.max_concurrent_decodes * eng.pages_per_slot + 1)
  state = eng.set_page_table(state, table.reshape(eng.max_concurrent_decodes, -1))

  def steps():
    nonlocal state
    for _ in range(n):
      state, out = eng.generate(decode_state=state)
    return out

  steps()
  return 1e3 * timed(steps, repeats)[0] / n


def _drift(cfg, params, results, prompts):
  """max / mean |engine logprob - fp32 full-attention teacher-forced logprob| over all tokens."""
  fwd = jax.jit(lambda t: tfm.apply(params, t, cfg))
  diffs = []
  for r, p in zip(results, prompts, strict=True):
    seq = jnp.asarray([list(p) + r.tokens])
    logp = jax.nn.log_softmax(fwd(seq)[0], -1)
    want = np.asarray(logp[len(p) - 1 + np.arange(len(r.tokens)), np.asarray(r.tokens)])
    diffs.append(np.abs(np.asarray(r.logprobs) - want))
  d = np.concatenate(diffs)
  return float(d.max()), float(d.mean())


def bench_tiers(cfg, params, repeats, c=8, long_new=448):
  """int8 weights and KV eviction: decode step time vs fp32 / full cache, and logprob drift."""
  rng = np.random.default_rng(7)
  prompts = [list(map(int, rng.integers(0, cfg.vocab_size, PROMPT))) for _ in range(c)]
  greedy = SamplingParams(greedy=True)
  rows = []
  for name, kw, new in (
    ("int8_weights", dict(weight_dtype="int8"), NEW),
    ("int8_kv", dict(kv_dtype="int8"), NEW),
  ):
    base = Engine(cfg, params, max_concurrent_decodes=c, max_seq_len=PROMPT + NEW)
    fast = Engine(cfg, params, max_concurrent_decodes=c, max_seq_len=PROMPT + NEW, **kw)
    with Generator(fast) as g:
      res = g.generate([GenerationRequest(p, new, greedy) for p in prompts])
    t0, t1 = _decode_step_ms(base, repeats), _decode_step_ms(fast, repeats)
    mx, mean = _drift(cfg, params, res, prompts)
    rows.append(
      dict(tier=name, step_ms_base=t0, step_ms=t1, speedup=t0 / t1, drift_max=mx, drift_mean=mean)
    )
  lcfg = cfg.replace(max_seq_len=PROMPT + long_new)
  window = kv_evict.Window(sink=1, ring=8)  # 16 sink tokens + a 113..128-token recent window
  base = Engine(lcfg, params, max_concurrent_decodes=c)
  fast = Engine(lcfg, params, max_concurrent_decodes=c, window=window)
  with Generator(fast) as g:
    res = g.generate([GenerationRequest(p, long_new, greedy) for p in prompts])
  t0, t1 = _decode_step_ms(base, repeats), _decode_step_ms(fast, repeats)
  mx, mean = _drift(lcfg, params, res, prompts)
  rows.append(
    dict(tier=f"evict_sink16_window128_len{PROMPT + long_new}", step_ms_base=t0, step_ms=t1,
         speedup=t0 / t1, drift_max=mx, drift_mean=mean)
  )  # fmt: skip
  return rows


def rounded(row, nd=3):
  """Floats to nd places, in nested dicts too (for printing)."""
  if isinstance(row, dict):
    return {k: rounded(v, nd) for k, v in row.items()}
  return round(row, nd) if isinstance(row, float) else row


def start_peers(cfg, args) -> dict:
  """The --peers, each in its child process, compiled for every concurrency (see peers.Peer)."""
  import peers  # benchmarks/peers (this script's folder is on sys.path)

  kw = dict(concurrency=args.concurrency, prompt=PROMPT, new=NEW)
  start = {
    "tunix": lambda: peers.tunix("sampler", cfg, **kw),
    "transformers": lambda: peers.hf_generate(cfg, **kw),
  }
  out = {}
  for name in [p for p in args.peers.split(",") if p]:
    if name not in start:
      raise SystemExit(f"generate.py: --peers: unknown peer {name!r} (tunix, transformers)")
    out[name] = start[name]()
  return out


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--concurrency", default="1,8,32")
  ap.add_argument("--naive_tokens", type=int, default=16)
  ap.add_argument("--speculative", action="store_true")
  ap.add_argument("--tiers", action="store_true", help="int8 weights / int8 KV / KV eviction")
  ap.add_argument("--peers", default="", help="comma list of tunix, transformers")
  ap.add_argument("--decode_chunk", type=int, default=0, help="Generator steps per dispatch")
  args = ap.parse_args()
  cfg, params = model()
  print(f"model: {config.num_params(cfg) / 1e6:.1f}M params, devices {jax.devices()}")
  print(f"load average (1, 5, 15 min) at start: {os.getloadavg()}")
  peer_procs = start_peers(cfg, args)
  for c in [int(c) for c in args.concurrency.split(",") if c]:
    kw = {"decode_chunk": args.decode_chunk} if args.decode_chunk else {}
    row = bench_concurrency(cfg, params, c, args.repeats, args.naive_tokens, peer_procs, kw)
    print(json.dumps(rounded(row)), flush=True)
  for peer in peer_procs.values():
    peer.close()
  if args.tiers:
    for row in bench_tiers(cfg, params, args.repeats):
      print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in row.items()}))
  if args.speculative:
    for row in bench_speculative(cfg, params, args.repeats):
      print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}))


if __name__ == "__main__":
  main()
