"""Multi-host JAX: 2 processes x 4 CPU devices against 1 process x 8 devices.

The same sharded GRPO step (rl.train_step) runs in both layouts and must give the same
metrics and parameters; orbax checkpoints (rl.runtime.checkpoint) saved by the 2 processes restore
in 1 process and the other way round. The workers are this file run as a script, joined
through `parallel.distributed` with a coordinator on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from absl import flags
from procs import with_parent

from parallel import distributed

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N_STEPS = 2
SAVE_STEP = 1


# ----------------------------------------------------------------- shared by both sides


def _configs():
  from models.config import tiny
  from rl.config import OptimConfig, TrainConfig

  model_cfg = tiny(
    "qwen3", vocab_size=64, d_model=32, n_layers=1, d_ff=64, head_dim=8, max_seq_len=64
  )
  return model_cfg, TrainConfig(optim=OptimConfig(lr=1e-2, decay_steps=10))


def _setup(mesh_sizes: dict):
  """Model, configs, mesh, initial state and jitted step; identical in every process."""
  from parallel.mesh import MeshConfig, make_mesh
  from rl.train_state import create_train_state
  from rl.train_step import make_train_step

  model_cfg, cfg = _configs()
  mesh = make_mesh(MeshConfig(**mesh_sizes))
  state, shardings = create_train_state(model_cfg, cfg, mesh, jax.random.key(0))
  step = make_train_step(model_cfg, cfg, mesh, shardings, _batch())
  return mesh, state, shardings, step


def _batch():
  """A deterministic packed GRPO batch: 8 trajectories in 4 groups, 4 rows of 32 tokens."""
  from rl.packing import pack

  rng = np.random.default_rng(0)
  trajs = []
  for i in range(8):
    n = int(rng.integers(8, 16))
    mask = np.zeros(n, np.float32)
    mask[n // 2 :] = 1.0  # the second half is the "response"
    tokens = rng.integers(1, 64, n)
    trajs.append(dict(tokens=tokens, loss_mask=mask, reward=float(rng.random()), group_id=i // 2))
  batch, _ = pack(trajs, row_len=32, max_segments=2, row_multiple=4)
  return batch


def _train(state, step, mesh):
  """Runs N_STEPS updates; returns host metrics per step and the state after SAVE_STEP."""
  from parallel.sharding import shard_batch

  metrics, saved = [], None
  for i in range(1, N_STEPS + 1):
    state, m = step(state, shard_batch(_batch(), mesh))
    metrics.append({k: float(v) for k, v in m.items()})
    if i == SAVE_STEP:
      saved = state
      state = jax.tree.map(lambda x: x.copy(), state)  # the next step donates its input
  return state, metrics, saved


def _to_host(tree):
  """Global arrays -> NumPy on every process (an all-gather across processes)."""
  from jax.experimental import multihost_utils

  return jax.tree.map(lambda x: np.asarray(multihost_utils.process_allgather(x, tiled=True)), tree)


def _max_diff(a, b):
  return max(
    float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) if np.size(x) else 0.0
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True)
  )


# ----------------------------------------------------------------- worker (2 processes)


def _worker(out_dir: str) -> None:
  from rl.runtime.checkpoint import Checkpointer

  dist = distributed.initialize_from_flags_or_env()
  assert jax.process_count() == 2 and jax.device_count() == 8 and jax.local_device_count() == 4
  mesh, state, shardings, step = _setup(dict(data=2, fsdp=2, tensor=2))
  state, metrics, saved = _train(state, step, mesh)
  ckpt = Checkpointer(os.path.join(out_dir, "ckpt_2proc"), async_save=False)
  ckpt.save(SAVE_STEP, saved, {"writer": "2 processes"}, force=True)
  ckpt.close()
  # Restore what the single process saved onto this 2-process mesh.
  restored, host = Checkpointer(os.path.join(out_dir, "ckpt_1proc")).restore(saved)
  assert restored.params["layers"]["wq"].sharding == shardings.params["layers"]["wq"]
  result = {
    "metrics": metrics,
    "restore_diff": _max_diff(_to_host(restored), _to_host(saved)),
    "restored_host": host,
  }
  final = _to_host(state.params)
  if dist.process_id == 0:
    np.savez(os.path.join(out_dir, "params.npz"), *jax.tree.leaves(final))
    with open(os.path.join(out_dir, "result.json"), "w") as f:
      json.dump(result, f)


# ----------------------------------------------------------------- the tests


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _spawn_workers(out_dir: str, timeout: float = 600.0):
  """Runs the 2 workers; if one fails the other is killed (it would wait for its peer)."""
  port = _free_port()
  procs, logs = [], []
  for pid in range(2):
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)  # the 8 fake devices of conftest; workers get 4 each
    env.update(
      JAX_PLATFORMS="cpu",
      PYTHONPATH=REPO + os.pathsep + env.get("PYTHONPATH", ""),
      AGENTRL_COORDINATOR=f"127.0.0.1:{port}",
      AGENTRL_NUM_PROCESSES="2",
      AGENTRL_PROCESS_ID=str(pid),
      AGENTRL_CPU_DEVICES="4",
    )
    logs.append(open(os.path.join(out_dir, f"worker{pid}.log"), "w+"))
    cmd = [sys.executable, os.path.abspath(__file__), out_dir]
    procs.append(
      subprocess.Popen(with_parent(cmd), env=env, stdout=logs[-1], stderr=subprocess.STDOUT)
    )
  deadline = time.monotonic() + timeout
  try:
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
      if any(p.poll() not in (None, 0) for p in procs):
        break
      time.sleep(0.2)
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
      p.wait()
  for pid, (p, log) in enumerate(zip(procs, logs, strict=True)):
    log.seek(0)
    out = log.read()
    log.close()
    assert p.returncode == 0, f"worker {pid} exited {p.returncode}:\n{out[-4000:]}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """The single-process run (saving its checkpoint first), then the 2-process run."""
  from rl.runtime.checkpoint import Checkpointer

  out = str(tmp_path_factory.mktemp("multihost"))
  mesh, state, shardings, step = _setup(dict(data=2, fsdp=2, tensor=2))
  state, metrics, saved = _train(state, step, mesh)
  ckpt = Checkpointer(os.path.join(out, "ckpt_1proc"), async_save=False)
  ckpt.save(SAVE_STEP, saved, {"writer": "1 process"}, force=True)
  ckpt.close()
  _spawn_workers(out)
  with open(os.path.join(out, "result.json")) as f:
    result = json.load(f)
  two_params = list(np.load(os.path.join(out, "params.npz")).values())
  return dict(out=out, metrics=metrics, params=state.params, saved=saved, two=result,
              two_params=two_params)  # fmt: skip


def test_two_processes_match_one_process(runs):
  one, two = runs["metrics"], runs["two"]["metrics"]
  assert len(one) == len(two) == N_STEPS
  for m1, m2 in zip(one, two, strict=True):
    assert set(m1) == set(m2)
    for k in m1:
      np.testing.assert_allclose(m2[k], m1[k], rtol=1e-5, atol=1e-6, err_msg=k)
  # The updates really moved the params (a step that did nothing would also "match").
  assert _max_diff(runs["params"], runs["saved"].params) > 1e-4
  leaves = jax.tree.leaves(runs["params"])
  assert len(leaves) == len(runs["two_params"])
  for a, b in zip(leaves, runs["two_params"], strict=True):
    np.testing.assert_allclose(b, np.asarray(a), rtol=1e-5, atol=1e-6)


def test_checkpoint_from_two_processes_restores_in_one(runs):
  from parallel.mesh import MeshConfig, make_mesh
  from rl.runtime.checkpoint import Checkpointer
  from rl.train_state import state_shardings

  # Restore onto another layout (fsdp=8) than the one saved, so the shards are re-cut.
  model_cfg, cfg = _configs()
  mesh = make_mesh(MeshConfig(fsdp=8))
  sh = state_shardings(model_cfg, cfg, mesh, with_ref=False)
  template = jax.tree.map(
    lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), runs["saved"], sh
  )
  restored, host = Checkpointer(os.path.join(runs["out"], "ckpt_2proc")).restore(template)
  assert host == {"writer": "2 processes"}
  assert restored.params["embed"].sharding == sh.params["embed"]
  assert int(restored.step) == SAVE_STEP
  assert _max_diff(restored, runs["saved"]) <= 1e-6


def test_checkpoint_from_one_process_restores_in_two(runs):
  assert runs["two"]["restored_host"] == {"writer": "1 process"}
  assert runs["two"]["restore_diff"] <= 1e-6


# ----------------------------------------------------------------- flags / environment


def test_resolve_precedence_and_errors():
  env = {
    "JAX_COORDINATOR_ADDRESS": "10.0.0.1:1",
    "AGENTRL_COORDINATOR": "127.0.0.1:7777",
    "AGENTRL_NUM_PROCESSES": "4",
    "JAX_PROCESS_ID": "3",
    "AGENTRL_LOCAL_DEVICE_IDS": "0,1",
  }
  cfg = distributed.resolve(environ=env)
  assert (cfg.coordinator, cfg.num_processes, cfg.process_id) == ("127.0.0.1:7777", 4, 3)
  assert cfg.local_device_ids == (0, 1) and cfg.multi_process
  assert distributed._bind_address(cfg) == "127.0.0.1:7777"  # loopback stays on loopback
  assert (
    distributed._bind_address(
      distributed.resolve(environ={**env, "AGENTRL_COORDINATOR": "10.1.2.3:5"})
    )
    is None
  )

  fv = flags.FlagValues()
  distributed.define_flags(fv)
  distributed.define_flags(fv)  # idempotent
  fv(["prog", "--process_id=1", "--cpu_devices=2"])
  cfg = distributed.resolve(fv, env, num_processes=2)
  assert (cfg.num_processes, cfg.process_id, cfg.cpu_devices) == (2, 1, 2)  # arg > flag > env

  assert not distributed.resolve(environ={}).multi_process  # nothing set: one process
  with pytest.raises(ValueError, match=r"missing \['process_id'\]"):
    distributed.resolve(environ={"AGENTRL_COORDINATOR": "h:1", "AGENTRL_NUM_PROCESSES": "2"})
  with pytest.raises(ValueError, match="AGENTRL_NUM_PROCESSES"):
    distributed.resolve(environ={"AGENTRL_NUM_PROCESSES": "two"})
  with pytest.raises(ValueError, match="not in"):
    distributed.resolve(environ={**env, "AGENTRL_PROCESS_ID": "4"})


if __name__ == "__main__":
  sys.path.insert(0, REPO)
  _worker(sys.argv[1])
