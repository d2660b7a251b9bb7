"""GRPO update throughput vs a plain cross-entropy step of the same shapes, and vs peak matmul.

Runs, in one process on the same mesh, for the ~20M Qwen3-shaped model (models.config.qwen3_20m):
  grpo   rl.train_step.make_train_step: advantages (GRPO group mean/std), PPO clip-higher
         against behaviour log-probs, token-mean aggregation, metrics (clip fractions,
         approx KL, entropy, ratio and advantage statistics), global-norm clip + AdamW
  ce     a plain masked next-token cross-entropy step: same model, params, batch shapes,
         optimizer, shardings and donation, nothing else
  peak   a jitted square matmul in the compute dtype (and f32), timed before and after
Timings are medians; grpo and ce alternate so machine load drifts affect both alike; on a
CPU backend the ratio is also given by process CPU time, which other users' load inflates less.
Targets: grpo/ce tokens/s >= 0.95; achieved/peak FLOP/s >= 0.65.

FLOP count per step (only useful work, as benchmarks/forward.py):
  6 * N_matmul * tokens + 6 * n_layers * n_heads * head_dim * T^2 * B (causal attention)
with N_matmul = every weight used in a matmul (layer matrices + the LM head).

  python benchmarks/train_step.py                      # B=32, T=192, fp32
  python benchmarks/train_step.py --dtype=bfloat16 --batch=64 --seq_len=512 --matmul_n=8192
"""

from __future__ import annotations

import math
import os
import pathlib
import sys
import time

from absl import app, flags

flags.DEFINE_integer("batch", 32, "sequences per step")
flags.DEFINE_integer("seq_len", 192, "tokens per sequence")
flags.DEFINE_integer("steps", 5, "timed steps of each kind (after one warm-up)")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "compute dtype (params stay fp32)")
flags.DEFINE_enum("attention", "chunked", ["chunked", "naive"], "attention implementation")
flags.DEFINE_enum("remat", "none", ["none", "full", "save_dots"], "rematerialisation")
flags.DEFINE_integer("micro_batches", 1, "gradient accumulation steps of the GRPO step")
flags.DEFINE_bool("entropy", True, "compute the entropy metric in the GRPO step")
flags.DEFINE_integer("matmul_n", 2048, "size of the square reference matmul")
FLAGS = flags.FLAGS
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout


def _median(times):
  return sorted(times)[len(times) // 2]


def matmul_flops_per_s(n: int, dtype, steps: int) -> float:
  import jax
  import jax.numpy as jnp

  a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32).astype(dtype)
  b = jax.random.normal(jax.random.key(1), (n, n), jnp.float32).astype(dtype)
  f = jax.jit(jnp.matmul)
  jax.block_until_ready(f(a, b))
  times = []
  for _ in range(steps):
    t = time.perf_counter()
    jax.block_until_ready(f(a, b))
    times.append(time.perf_counter() - t)
  return 2 * n**3 / _median(times)


def step_flops(cfg, batch: int, seq_len: int) -> float:
  from models import transformer

  shapes = transformer.param_shapes(cfg)
  n_matmul = sum(
    math.prod(s)
    for name, s in shapes["layers"].items()
    if not name.endswith("norm") and not name.startswith("b")
  )
  n_matmul += cfg.vocab_size * cfg.d_model  # LM head (tied or not)
  attn = 6 * cfg.n_layers * cfg.n_heads * cfg.head_dim * seq_len**2 * batch
  return 6 * n_matmul * batch * seq_len + attn


def make_batch(cfg, B: int, T: int, group: int = 8):
  import numpy as np

  rng = np.random.default_rng(0)
  mask = np.zeros((B, T), np.float32)
  mask[:, T // 4 :] = 1.0  # first quarter is the prompt
  return {
    "tokens_BT": rng.integers(0, cfg.vocab_size, (B, T)).astype(np.int32),
    "positions_BT": np.broadcast_to(np.arange(T, dtype=np.int32), (B, T)).copy(),
    "segment_ids_BT": np.ones((B, T), np.int32),
    "loss_mask_BT": mask,
    "behaviour_logprobs_BT": (-rng.random((B, T)) * 3 - 7).astype(np.float32),
    "rewards_BS": rng.integers(0, 2, (B, 1)).astype(np.float32),
    "group_ids_BS": (np.arange(B) // group).astype(np.int32)[:, None],
  }


def make_ce_step(model_cfg, cfg, mesh, shardings, batch):
  """The baseline: masked next-token cross-entropy, same optimizer/shardings/donation."""
  import jax
  import jax.numpy as jnp
  import optax

  from models import transformer
  from parallel import sharding
  from parallel.rules import merge_rules, use_mesh_rules
  from rl.train_state import make_optimizer

  rules = merge_rules(overrides=cfg.rules)
  tx = make_optimizer(cfg.optim, transformer.param_axes(model_cfg))

  def loss_fn(params, b):
    logits = transformer.apply(
      params,
      b["tokens_BT"],
      model_cfg,
      positions_BT=b["positions_BT"],
      segment_ids_BT=b["segment_ids_BT"],
    )[:, :-1]
    gold = jnp.take_along_axis(logits, b["tokens_BT"][:, 1:, None], axis=-1)[..., 0]
    nll = jax.nn.logsumexp(logits, axis=-1) - gold
    mask = b["loss_mask_BT"][:, 1:]
    return jnp.sum(nll * mask) / jnp.sum(mask)

  def step(state, b):
    with use_mesh_rules(mesh, rules):
      loss, grads = jax.value_and_grad(loss_fn)(state.params, b)
      updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    return state.replace(step=state.step + 1, params=params, opt_state=opt_state), {"loss": loss}

  b_sh = sharding.batch_shardings(batch, mesh, rules)
  return jax.jit(
    step,
    in_shardings=(shardings, b_sh),
    out_shardings=(shardings, sharding.replicated(mesh)),
    donate_argnums=(0,),
  )


def main(_):
  import jax
  import jax.numpy as jnp

  from models import config
  from parallel.mesh import MeshConfig, make_mesh
  from rl.config import LossConfig, OptimConfig, TrainConfig
  from rl.train_state import create_train_state
  from rl.train_step import make_train_step

  model_cfg = config.qwen3_20m(dtype=FLAGS.dtype, attention=FLAGS.attention, remat=FLAGS.remat)
  cfg = TrainConfig(
    loss=LossConfig(compute_entropy=FLAGS.entropy),
    optim=OptimConfig(lr=1e-5, warmup_steps=10, decay_steps=1000),
    mesh=MeshConfig(fsdp=-1),
    micro_batches=FLAGS.micro_batches,
  )
  mesh = make_mesh(cfg.mesh)
  B, T = FLAGS.batch, FLAGS.seq_len
  batch = make_batch(model_cfg, B, T)
  ce_batch = {k: batch[k] for k in ("tokens_BT", "positions_BT", "segment_ids_BT", "loss_mask_BT")}
  grpo_state, shardings = create_train_state(model_cfg, cfg, mesh, jax.random.key(0))
  ce_state, _ = create_train_state(model_cfg, cfg, mesh, jax.random.key(0))
  grpo = make_train_step(model_cfg, cfg, mesh, shardings, batch)
  ce = make_ce_step(model_cfg, cfg, mesh, shardings, ce_batch)

  peak_dt = jnp.bfloat16 if FLAGS.dtype == "bfloat16" else jnp.float32
  peak = [matmul_flops_per_s(FLAGS.matmul_n, peak_dt, FLAGS.steps)]
  t = time.perf_counter()
  grpo_state, m = jax.block_until_ready(grpo(grpo_state, batch))
  compile_grpo = time.perf_counter() - t
  t = time.perf_counter()
  ce_state, _ = jax.block_until_ready(ce(ce_state, ce_batch))
  compile_ce = time.perf_counter() - t
  t_grpo, t_ce, c_grpo, c_ce = [], [], [], []
  for _ in range(FLAGS.steps):  # alternate, so load drifts hit both alike
    t, c = time.perf_counter(), time.process_time()
    grpo_state, m = jax.block_until_ready(grpo(grpo_state, batch))
    t_grpo.append(time.perf_counter() - t)
    c_grpo.append(time.process_time() - c)
    t, c = time.perf_counter(), time.process_time()
    ce_state, _ = jax.block_until_ready(ce(ce_state, ce_batch))
    t_ce.append(time.perf_counter() - t)
    c_ce.append(time.process_time() - c)
  peak.append(matmul_flops_per_s(FLAGS.matmul_n, peak_dt, FLAGS.steps))
  peak32 = matmul_flops_per_s(FLAGS.matmul_n, jnp.float32, FLAGS.steps)

  sg, sc = _median(t_grpo), _median(t_ce)
  flops = step_flops(model_cfg, B, T)
  best = max(peak)
  print(
    f"when: {time.strftime('%Y-%m-%d %H:%M:%S')}  load average: "
    f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}  devices: {jax.devices()[0].device_kind}"
    f" x{jax.device_count()}  cpus: {os.cpu_count()}"
  )
  print(
    f"model: {config.num_params(model_cfg) / 1e6:.1f}M params, batch {B} x {T} tokens, dtype "
    f"{model_cfg.dtype} (fp32 master params), attention {model_cfg.attention}, remat "
    f"{model_cfg.remat}, micro-batches {cfg.micro_batches}, entropy metric {FLAGS.entropy}"
  )
  print(f"compile: grpo {compile_grpo:.1f} s, ce {compile_ce:.1f} s (first call, incl. one step)")
  print(f"grpo step: {sg * 1e3:.0f} ms, {B * T / sg:,.0f} tokens/s (all {B * T} tokens)")
  print(f"ce step:   {sc * 1e3:.0f} ms, {B * T / sc:,.0f} tokens/s")
  print(f"ratio grpo / ce tokens/s: {sc / sg:.3f}   (target >= 0.95)")
  # On a shared machine wall time includes waiting for the CPU; process CPU time does not.
  print(f"ratio by process CPU time (host backends): {_median(c_ce) / _median(c_grpo):.3f}")
  print(
    f"matmul {FLAGS.matmul_n}^3 {jnp.dtype(peak_dt).name}: {peak[0] / 1e9:.1f} GFLOP/s before, "
    f"{peak[1] / 1e9:.1f} after; f32 {peak32 / 1e9:.1f}"
  )
  print(
    f"achieved: grpo {flops / sg / 1e9:.1f} GFLOP/s ({flops / 1e9:.1f} GFLOP/step), "
    f"ratio to peak {flops / sg / best:.2f}; ce {flops / sc / best:.2f}   (target >= 0.65)"
  )
  print(
    f"grpo metrics after {int(grpo_state.step)} steps: loss {float(m['loss']):.4f}, "
    f"entropy {float(m['entropy']) if 'entropy' in m else float('nan'):.3f}"
  )


if __name__ == "__main__":
  app.run(main)
