"""The README's update step, runnable: a sharded GRPO/PPO step on packed trajectories.

  python examples/update_step.py        # 4 CPU devices (set here), a tiny model, one step

Sizes are tiny (the README shows a 20M model, rows of 4096); the calls are the same.
"""

import os

# A (2 data x 2 tensor) mesh needs 4 devices; on a CPU-only machine fake them.
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax  # noqa: E402
import numpy as np  # noqa: E402

from models.config import tiny  # noqa: E402
from parallel.mesh import MeshConfig, make_mesh  # noqa: E402
from rl.packing import pack  # noqa: E402
from rl.train_config import LossConfig, OptimConfig, TrainConfig  # noqa: E402
from rl.train_state import create_train_state  # noqa: E402
from rl.train_step import make_train_step  # noqa: E402


def trajectories(n: int = 8, group: int = 4, seed: int = 0) -> list[dict]:
  """Stand-ins for finished episodes: tokens, which of them the policy wrote, reward, group."""
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    length = int(rng.integers(8, 24))
    loss_mask = np.zeros(length, np.float32)
    loss_mask[length // 2 :] = 1  # the second half is the policy's reply
    out.append(
      dict(
        tokens=rng.integers(1, 256, length),
        loss_mask=loss_mask,
        behaviour_logprobs=np.full(length, -2.0, np.float32),  # the engine's log-probs
        reward=float(i % 2),
        group_id=i // group,
      )
    )
  return out


def main() -> dict:
  model_cfg = tiny("qwen3")
  cfg = TrainConfig(
    loss=LossConfig(
      advantage="grpo",
      policy_loss="ppo",
      clip_low=0.2,
      clip_high=0.28,
      aggregation="token-mean",
      kl="none",
    ),  # fmt: skip
    optim=OptimConfig(lr=1e-4, warmup_steps=1, decay_steps=10, max_grad_norm=1.0),
    mesh=MeshConfig(data=2, fsdp=-1, tensor=2),  # -1 takes the remaining devices
    micro_batches=2,  # gradient accumulation, exact
  )
  mesh = make_mesh(cfg.mesh, jax.devices()[:4])
  state, shardings = create_train_state(model_cfg, cfg, mesh, jax.random.key(0))  # born sharded
  batch, _ = pack(trajectories(), row_len=64, max_segments=4, row_multiple=4)
  step = make_train_step(model_cfg, cfg, mesh, shardings, batch)  # jit, shardings, donation
  state, metrics = step(state, batch)  # compiles once, then reuses
  metrics = {k: float(v) for k, v in jax.device_get(metrics).items() if np.ndim(v) == 0}
  print({k: round(v, 4) for k, v in sorted(metrics.items())})
  return metrics


if __name__ == "__main__":
  main()
