"""The GRPO update with LoRA vs full fine-tuning: step time and trainable state, in one run.

Both steps are rl.train_step.make_train_step on the same model (models.config.qwen3_20m),
batch, mesh and optimizer; `lora` trains rank-r adapters on every linear layer weight
(TrainConfig.lora), `full` every weight. Timings are medians, the two kinds alternate so
load drifts affect both alike; on a CPU the ratio is also given in process CPU time.

  python benchmarks/lora_step.py                       # B=16, T=128, rank 16
  python benchmarks/lora_step.py --rank=64 --batch=32 --seq_len=256
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
import time

from absl import app, flags

flags.DEFINE_integer("batch", 16, "sequences per step")
flags.DEFINE_integer("seq_len", 128, "tokens per sequence")
flags.DEFINE_integer("steps", 4, "timed steps of each kind (after one warm-up)")
flags.DEFINE_integer("rank", 16, "LoRA rank")
FLAGS = flags.FLAGS
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout


def _batch(B: int, T: int, vocab: int):
  import numpy as np

  rng = np.random.default_rng(0)
  mask = np.zeros((B, T), np.float32)
  mask[:, T // 4 :] = 1
  return {
    "tokens_BT": rng.integers(1, vocab, (B, T)).astype(np.int32),
    "segment_ids_BT": np.ones((B, T), np.int32),
    "positions_BT": np.broadcast_to(np.arange(T, dtype=np.int32), (B, T)).copy(),
    "loss_mask_BT": mask,
    "behaviour_logprobs_BT": (-rng.random((B, T)) * 3).astype(np.float32),
    "rewards_BS": rng.random((B, 1)).astype(np.float32),
    "group_ids_BS": (np.arange(B) // 4).astype(np.int32)[:, None],
  }


def main(_):
  import jax

  from models import lora
  from models.config import qwen3_20m
  from parallel.mesh import make_mesh
  from rl.config import OptimConfig, TrainConfig
  from rl.train_state import create_train_state
  from rl.train_step import make_train_step

  model_cfg = qwen3_20m()
  batch = _batch(FLAGS.batch, FLAGS.seq_len, model_cfg.vocab_size)
  full = TrainConfig(optim=OptimConfig(lr=1e-5))
  kinds = {
    "full": full,
    "lora": dataclasses.replace(full, lora=lora.LoraConfig(rank=FLAGS.rank, alpha=FLAGS.rank)),
  }
  mesh = make_mesh(full.mesh)
  runs = {}
  for name, cfg in kinds.items():
    state, sh = create_train_state(model_cfg, cfg, mesh, jax.random.key(0))
    step = make_train_step(model_cfg, cfg, mesh, sh, batch)
    state, m = step(state, batch)  # compile + warm-up
    jax.block_until_ready(m)
    n_train = sum(x.size for x in jax.tree.leaves(state.params))
    n_opt = sum(x.size for x in jax.tree.leaves(state.opt_state))
    runs[name] = {
      "state": state,
      "step": step,
      "wall": [],
      "cpu": [],
      "train": n_train,
      "opt": n_opt,
    }
  for _ in range(FLAGS.steps):
    for r in runs.values():
      t, c = time.perf_counter(), time.process_time()
      r["state"], m = r["step"](r["state"], batch)
      jax.block_until_ready(m)
      r["wall"].append(time.perf_counter() - t)
      r["cpu"].append(time.process_time() - c)
  med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
  tokens = FLAGS.batch * FLAGS.seq_len
  for name, r in runs.items():
    print(
      f"{name:5s} step {med(r['wall']):.3f} s ({tokens / med(r['wall']):.0f} tok/s), "
      f"cpu {med(r['cpu']):.3f} s, trainable {r['train'] / 1e6:.2f}M, opt state {r['opt'] / 1e6:.2f}M"
    )
  f, lo = runs["full"], runs["lora"]
  print(
    f"lora/full step time: wall {med(lo['wall']) / med(f['wall']):.2f}x, "
    f"cpu {med(lo['cpu']) / med(f['cpu']):.2f}x; trainable {lo['train'] / f['train']:.4f}x, "
    f"optimizer state {lo['opt'] / f['opt']:.4f}x"
  )


if __name__ == "__main__":
  app.run(main)
