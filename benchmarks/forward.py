"""Forward+backward throughput of the ~20M-parameter Qwen3-shaped model vs the machine's matmul.

Prints tokens/s of a jitted value_and_grad of the next-token cross-entropy, and the ratio
of achieved FLOP/s to the FLOP/s of a large jitted f32 matmul measured in the same run.

FLOP count (per step, only useful work):
  6 * N_matmul * tokens                       (forward 2N, backward 4N per token)
  + 6 * n_layers * n_heads * head_dim * T^2 * B   (causal attention: QK^T and PV are
                                                  4*T^2*d per head forward, halved by the
                                                  causal mask, times 3 for fwd+bwd)
where N_matmul counts every weight used in a matmul: all layer matrices plus the LM head
(the tied embedding counts once, as the head; the embedding lookup is not a matmul).

  python benchmarks/forward.py                       # B=8, T=512, fp32
  python benchmarks/forward.py --batch=16 --attn_chunk=256
"""

from __future__ import annotations

import os
import pathlib
import sys
import time

from absl import app, flags

flags.DEFINE_integer("batch", 8, "sequences per step")
flags.DEFINE_integer("seq_len", 512, "tokens per sequence")
flags.DEFINE_integer("steps", 5, "timed steps (after one warm-up), interleaved with matmuls")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "compute dtype")
flags.DEFINE_enum("attention", "chunked", ["chunked", "naive"], "attention implementation")
flags.DEFINE_integer("attn_chunk", 128, "chunk length of the chunked attention")
flags.DEFINE_enum("remat", "none", ["none", "full", "save_dots"], "rematerialisation")
flags.DEFINE_multi_integer(
  "matmul_sizes", [2048, 4096], "square reference matmuls; the fastest counts"
)
FLAGS = flags.FLAGS
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout


def _time_once(fn, *args) -> float:
  import jax

  t = time.perf_counter()
  jax.block_until_ready(fn(*args))
  return time.perf_counter() - t


def _matmul_setup(n: int):
  import jax
  import jax.numpy as jnp

  a = jax.random.normal(jax.random.PRNGKey(0), (n, n), jnp.float32)
  b = jax.random.normal(jax.random.PRNGKey(1), (n, n), jnp.float32)
  mm = jax.jit(jnp.matmul)
  jax.block_until_ready(mm(a, b))  # compile
  return mm, a, b


def step_flops(cfg, batch: int, seq_len: int) -> float:
  from models.config import num_params

  emb = cfg.vocab_size * cfg.d_model
  n_matmul = num_params(cfg) - emb * (1 if cfg.tie_embeddings else 2) + emb
  n_matmul -= cfg.n_layers * 2 * cfg.d_model + cfg.d_model  # norm weights
  if cfg.qk_norm:
    n_matmul -= cfg.n_layers * 2 * cfg.head_dim
  attn = 6 * cfg.n_layers * cfg.n_heads * cfg.head_dim * seq_len**2 * batch
  return 6 * n_matmul * batch * seq_len + attn


def main(_):
  import jax
  import jax.numpy as jnp

  from models import config, transformer

  cfg = config.qwen3_20m(
    dtype=FLAGS.dtype, attention=FLAGS.attention, attn_chunk=FLAGS.attn_chunk, remat=FLAGS.remat
  )
  B, T = FLAGS.batch, FLAGS.seq_len
  params = transformer.init(cfg, jax.random.PRNGKey(0))
  tokens = jax.random.randint(jax.random.PRNGKey(1), (B, T + 1), 0, cfg.vocab_size)

  def loss(params, tokens):
    logits = transformer.apply(params, tokens[:, :-1], cfg)
    logz = jax.nn.logsumexp(logits, axis=-1)
    gold = jnp.take_along_axis(logits, tokens[:, 1:, None], axis=-1)[..., 0]
    return jnp.mean(logz - gold)

  step = jax.jit(jax.value_and_grad(loss))
  jax.block_until_ready(step(params, tokens))  # compile + warm-up
  mms = {n: _matmul_setup(n) for n in FLAGS.matmul_sizes}
  # Interleave the model step and the reference matmuls so that load from other
  # processes on a shared machine hits both alike; report the best of each.
  step_s, mm_s = [], {n: [] for n in mms}
  for _ in range(FLAGS.steps):
    step_s.append(_time_once(step, params, tokens))
    for n, (mm, a, b) in mms.items():
      mm_s[n].append(_time_once(mm, a, b))
  peaks = {n: 2 * n**3 / min(ts) for n, ts in mm_s.items()}
  peak = max(peaks.values())
  sec, med = min(step_s), sorted(step_s)[len(step_s) // 2]
  flops = step_flops(cfg, B, T)
  print(
    f"when: {time.strftime('%Y-%m-%d %H:%M:%S')}  load average: "
    f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}  devices: {jax.devices()[0].device_kind}"
    f" x{jax.device_count()}  cpus: {os.cpu_count()}"
  )
  print(
    f"model: {config.num_params(cfg) / 1e6:.1f}M params, batch {B} x {T} tokens, "
    f"dtype {cfg.dtype}, attention {cfg.attention}/{cfg.attn_chunk}, remat {cfg.remat}"
  )
  print(
    f"forward+backward: best {sec * 1e3:.0f} ms/step (median {med * 1e3:.0f}) over "
    f"{len(step_s)} steps, {B * T / sec:,.0f} tokens/s, {flops / sec / 1e9:.1f} GFLOP/s "
    f"({flops / 1e9:.1f} GFLOP/step)"
  )
  print(
    "reference matmul f32 (best): "
    + ", ".join(f"{n}^3 {p / 1e9:.1f} GFLOP/s" for n, p in peaks.items())
  )
  print(f"ratio achieved / matmul FLOP/s: {flops / sec / peak:.2f}")


if __name__ == "__main__":
  app.run(main)
