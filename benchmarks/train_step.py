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

FLOP count per step (the work each step runs, as benchmarks/forward.py):
  6 * N_layers * B * T + 6 * V * D * B * N_head + 6 * n_layers * n_heads * head_dim * T^2 * B
with N_layers = every layer weight used in a matmul and N_head = the positions the LM head
runs at: the GRPO step's layout (`rl.layout`: the loss tokens, bucketed) or all T. The CE
baseline runs twice: `ce` (LM head at every position) and `ce_loss_only` (the LM head at the
GRPO step's loss positions only, the same work as GRPO's head), so GRPO/CE compares equal work.

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
flags.DEFINE_integer("scan_unroll", 1, "layers per iteration of the layer scan (5: unrolled)")
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


def step_flops(cfg, batch: int, seq_len: int, head_positions: int | None = None) -> float:
  """fwd+bwd FLOPs of one step whose LM head runs at `head_positions` per row (None: all)."""
  from models import transformer

  shapes = transformer.param_shapes(cfg)
  n_layers = sum(
    math.prod(s)
    for name, s in shapes["layers"].items()
    if not name.endswith("norm") and not name.startswith("b")
  )
  head = cfg.vocab_size * cfg.d_model * batch * (head_positions or seq_len)
  attn = 6 * cfg.n_layers * cfg.n_heads * cfg.head_dim * seq_len**2 * batch
  return 6 * n_layers * batch * seq_len + 6 * head + attn


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


def make_ce_step(model_cfg, cfg, mesh, shardings, batch, n_logits=None):
  """The baseline: masked next-token cross-entropy, same optimizer/shardings/donation.

  n_logits: run the LM head only at the last n_logits - 1 .. T - 2 positions of each row
  (the predecessors of the loss tokens, which `make_batch` puts at the end) instead of all T.
  """
  import jax
  import jax.numpy as jnp
  import optax

  from models import transformer
  from parallel import sharding
  from parallel.rules import merge_rules, use_mesh_rules
  from rl.train_state import make_optimizer

  rules = merge_rules(overrides=cfg.rules)
  tx = make_optimizer(cfg.optim, transformer.param_axes(model_cfg))

  B, T = batch["tokens_BT"].shape
  n = n_logits or T
  index_BN = jnp.broadcast_to(jnp.arange(T - n, T, dtype=jnp.int32) - 1, (B, n)).clip(0)

  def loss_fn(params, b):
    logits = transformer.apply(
      params,
      b["tokens_BT"],
      model_cfg,
      positions_BT=b["positions_BT"],
      segment_ids_BT=b["segment_ids_BT"],
      logit_index_BN=None if n_logits is None else index_BN,
    )
    if n_logits is None:  # position t predicts token t + 1
      logits, gold_BN, mask = logits[:, :-1], b["tokens_BT"][:, 1:], b["loss_mask_BT"][:, 1:]
    else:
      gold_BN = b["tokens_BT"][:, T - n :]
      mask = b["loss_mask_BT"][:, T - n :] * (index_BN < jnp.arange(T - n, T))
    gold = jnp.take_along_axis(logits, gold_BN[..., None], axis=-1)[..., 0]
    nll = jax.nn.logsumexp(logits, axis=-1) - gold
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

  model_cfg = config.qwen3_20m(
    dtype=FLAGS.dtype, attention=FLAGS.attention, remat=FLAGS.remat, scan_unroll=FLAGS.scan_unroll
  )
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
  grpo = make_train_step(model_cfg, cfg, mesh, shardings, batch)
  n_logits = grpo.plan(batch).n_logits  # the LM-head positions the GRPO step runs (None: all)
  steps = {"grpo": grpo}
  steps["ce"] = make_ce_step(model_cfg, cfg, mesh, shardings, ce_batch)
  steps["ce_loss_only"] = make_ce_step(model_cfg, cfg, mesh, shardings, ce_batch, n_logits or T)
  states = {k: create_train_state(model_cfg, cfg, mesh, jax.random.key(0))[0] for k in steps}
  inputs = {"grpo": batch, "ce": ce_batch, "ce_loss_only": ce_batch}
  head = {"grpo": n_logits or T, "ce": T, "ce_loss_only": n_logits or T}

  peak_dt = jnp.bfloat16 if FLAGS.dtype == "bfloat16" else jnp.float32
  peak = [matmul_flops_per_s(FLAGS.matmul_n, peak_dt, FLAGS.steps)]
  compile_s, wall, cpu, m = {}, {k: [] for k in steps}, {k: [] for k in steps}, None
  for k, fn in steps.items():
    t = time.perf_counter()
    states[k], out = jax.block_until_ready(fn(states[k], inputs[k]))
    compile_s[k] = time.perf_counter() - t
  for _ in range(FLAGS.steps):  # alternate, so load drifts hit every kind alike
    for k, fn in steps.items():
      t, c = time.perf_counter(), time.process_time()
      states[k], out = jax.block_until_ready(fn(states[k], inputs[k]))
      wall[k].append(time.perf_counter() - t)
      cpu[k].append(time.process_time() - c)
      m = out if k == "grpo" else m
  peak.append(matmul_flops_per_s(FLAGS.matmul_n, peak_dt, FLAGS.steps))
  peak32 = matmul_flops_per_s(FLAGS.matmul_n, jnp.float32, FLAGS.steps)

  sec = {k: _median(v) for k, v in wall.items()}
  flops = {k: step_flops(model_cfg, B, T, head[k]) for k in steps}
  best = max(peak)
  print(
    f"when: {time.strftime('%Y-%m-%d %H:%M:%S')}  load average: "
    f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}  devices: {jax.devices()[0].device_kind}"
    f" x{jax.device_count()}  cpus: {os.cpu_count()}"
  )
  print(
    f"model: {config.num_params(model_cfg) / 1e6:.1f}M params, batch {B} x {T} tokens, dtype "
    f"{model_cfg.dtype} (fp32 master params), attention {model_cfg.attention}, remat "
    f"{model_cfg.remat}, scan_unroll {model_cfg.scan_unroll}, micro-batches "
    f"{cfg.micro_batches}, entropy metric {FLAGS.entropy}"
  )
  print("compile (first call, incl. one step): " + ", ".join(
    f"{k} {v:.1f} s" for k, v in compile_s.items()))  # fmt: skip
  for k in steps:
    print(
      f"{k:>12} step: {sec[k] * 1e3:.0f} ms, {B * T / sec[k]:,.0f} tokens/s (all {B * T} "
      f"tokens), LM head at {head[k]} of {T} positions, {flops[k] / 1e9:.1f} GFLOP/step, "
      f"{flops[k] / sec[k] / 1e9:.1f} GFLOP/s = {flops[k] / sec[k] / best:.2f} of peak"
    )
  for base in ("ce_loss_only", "ce"):
    # On a shared machine wall time includes waiting for the CPU; process CPU time does not.
    print(
      f"ratio grpo / {base} tokens/s: {sec[base] / sec['grpo']:.3f} (CPU time "
      f"{_median(cpu[base]) / _median(cpu['grpo']):.3f})"
      + ("   (target >= 0.95: equal work)" if base == "ce_loss_only" else "")
    )
  print(
    f"matmul {FLAGS.matmul_n}^3 {jnp.dtype(peak_dt).name}: {peak[0] / 1e9:.1f} GFLOP/s before, "
    f"{peak[1] / 1e9:.1f} after; f32 {peak32 / 1e9:.1f}; grpo achieved/peak "
    f"{flops['grpo'] / sec['grpo'] / best:.2f}   (target >= 0.65)"
  )
  print(
    f"grpo metrics after {int(states['grpo'].step)} steps: loss {float(m['loss']):.4f}, "
    f"entropy {float(m['entropy']) if 'entropy' in m else float('nan'):.3f}"
  )


if __name__ == "__main__":
  app.run(main)
