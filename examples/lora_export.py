"""The README's LoRA export, runnable: two LoRA update steps, then the merged HF folder and the
PEFT adapter folder, both read back.

  python examples/lora_export.py [OUT]    # a tiny model on one CPU device; OUT: a new folder

Sizes are tiny; the calls are the README's (`peft_io.save_merged / save_adapters /
load_adapters`), after the same update step as examples/update_step.py.
"""

import os
import runpy
import sys
import tempfile

import jax
import numpy as np

from models import lora
from models.config import tiny
from models.io import hf, peft_io
from parallel.mesh import single_device_mesh
from rl.packing import pack
from rl.train_config import LossConfig, OptimConfig, TrainConfig
from rl.train_state import create_train_state, policy_params
from rl.train_step import make_train_step

# The stand-in episodes of examples/update_step.py (run as a file: examples/ is not a package).
trajectories = runpy.run_path(os.path.join(os.path.dirname(__file__), "update_step.py"))[
  "trajectories"
]


def main(out: str | None = None) -> dict:
  out = out or tempfile.mkdtemp(prefix="agentrl-lora-")
  model_cfg = tiny("qwen3")
  cfg = TrainConfig(
    loss=LossConfig(advantage="grpo", policy_loss="ppo", kl="none"),
    optim=OptimConfig(lr=1e-2, warmup_steps=1, decay_steps=10),
    lora=lora.LoraConfig(rank=4, alpha=8.0, targets=("all-linear",)),
  )
  mesh = single_device_mesh()
  state, shardings = create_train_state(model_cfg, cfg, mesh, jax.random.key(0))
  batch, _ = pack(trajectories(), row_len=64, max_segments=4)
  step = make_train_step(model_cfg, cfg, mesh, shardings, batch)
  for _ in range(2):  # warm-up: the first step's learning rate is 0
    state, _ = step(state, batch)  # the adapters move (B leaves 0); the base stays frozen

  peft_io.save_merged(f"{out}/merged", model_cfg, state.frozen, state.params, cfg.lora)
  peft_io.save_adapters(f"{out}/adapter", model_cfg, state.params, cfg.lora, base_model="tiny")
  cfg_lora, adapters = peft_io.load_adapters(f"{out}/adapter", model_cfg)

  # The merged folder is a plain HF checkpoint equal to base + adapters.
  _, merged = hf.load(f"{out}/merged")
  want = jax.device_get(policy_params(state, cfg))
  err = max(
    float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
    for a, b in zip(jax.tree.leaves(merged), jax.tree.leaves(want), strict=True)
  )
  # The adapter folder reads back as the trained adapters.
  back = max(
    float(np.max(np.abs(np.asarray(a) - np.asarray(b))))
    for a, b in zip(jax.tree.leaves(adapters), jax.tree.leaves(state.params), strict=True)
  )
  b_max = max(float(np.max(np.abs(np.asarray(ab["b"])))) for ab in state.params.values())
  res = dict(out=out, rank=cfg_lora.rank, merged_err=err, adapter_err=back, b_max=b_max)
  print(res)
  return res


if __name__ == "__main__":
  main(sys.argv[1] if len(sys.argv) > 1 else None)
