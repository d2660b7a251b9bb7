"""`launch.train` as 2 processes x 2 CPU devices (coordinator 127.0.0.1) against 1 process x 4.

Process 0 runs rollouts in real bubblewrap sandboxes, the engine and telemetry; process 1 only
follows its device work (rl/runtime/multihost.py). Process 1 gets SIGTERM once step 1 is logged: process
0 must stop both at a step boundary. Both processes end with the same parameters (each prints a
digest of its shards; process 0 also compares every replica), and every step they trained is the
step of a 1-process run on the same data=2 x fsdp=2 mesh: the same trajectory ids, the same loss,
the same parameters. Both runs start with a short warm start (process 0's demonstrations shared).
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import re
import signal
import socket
import subprocess
import sys
import time

import jax
import numpy as np
import pytest
from procs import with_parent

from rl.runtime.telemetry import read_metrics
from rl.runtime.trajectory_store import TrajectoryStore

pytestmark = pytest.mark.slow
EXIT_INTERRUPTED = 130  # launch.train.EXIT_INTERRUPTED (importing launch.train defines its flags)

ROOT = pathlib.Path(__file__).resolve().parents[1]
STEPS = 6  # room for the SIGTERM after step 1 to land before the last step (episodes are fast)
OVERRIDES = [
  "--config.devices=0",
  "--config.train.mesh.data=2",
  "--config.train.mesh.fsdp=2",
  f"--config.loop.steps={STEPS}",
  "--config.loop.checkpoint_every=1",
  f"--config.loop.keep_checkpoints={STEPS + 1}",  # the 1-process run keeps the stop step
  "--config.loop.batch_groups=2",
  "--config.rollout.group_size=2",
  "--config.agent.max_new_tokens=96",  # the warm start's echo_word solutions need 93
  "--config.agent.max_episode_tokens=96",
  # A 2-step warm start: process 0 collects the demonstrations, every process takes the same
  # supervised steps on them (rl/runtime/run.py). The policy stays near-random and its rewards
  # mostly 0, so ...
  "--config.sft.steps=2",
  "--config.sft.demos=2",
  "--config.sft.batch_size=4",
  "--config.sft.warmup_steps=0",  # both steps move the weights
  # The two runs sum gradients in different orders (ulp-level); where a gradient entry is
  # below Adam's eps the step scales such a difference by lr / eps, so the toy's lr of 1e-2
  # left 2 of 49152 weights 1.9e-6 apart; at 1e-3 that bound is under the tolerance below.
  "--config.sft.lr=1e-3",
  "--config.train.loss.entropy_coef=0.01",  # ... the entropy term gives the update a gradient
]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _launch(tmp: pathlib.Path, name: str, workdir: pathlib.Path, **env_extra):
  env = dict(os.environ)
  env.pop("XLA_FLAGS", None)  # not the 8 devices of conftest
  env.update(
    JAX_PLATFORMS="cpu",
    PYTHONPATH=str(ROOT),
    JAX_COMPILATION_CACHE_DIR=str(tmp / "jax_cache"),
    **env_extra,
  )
  cmd = [sys.executable, "-m", "launch.train", "--config=configs/toy.py", f"--workdir={workdir}"]
  out, err = open(tmp / f"{name}.out", "w+"), open(tmp / f"{name}.err", "w+")
  proc = subprocess.Popen(with_parent(cmd + OVERRIDES), cwd=ROOT, env=env, stdout=out, stderr=err)
  proc.name, proc.files = name, (out, err)
  return proc


def _summary(proc, exit_status: int = 0) -> dict:
  """The JSON summary launch.train prints last."""
  out, err = proc.files
  out.seek(0)
  text = out.read()
  err.seek(0)
  tail = err.read()[-4000:]
  assert proc.returncode == exit_status, (
    f"{proc.name} exited {proc.returncode}:\n{text[-2000:]}\n{tail}"
  )
  blocks = re.findall(r"^\{$.*?^\}$", text, re.S | re.M)
  assert blocks, f"{proc.name}: no summary in its output:\n{text[-2000:]}"
  return json.loads(blocks[-1])


def _run_all(tmp: pathlib.Path, one: pathlib.Path, two: pathlib.Path) -> list:
  """All three processes at once (the sandboxes' waits overlap); SIGTERM to process 1 of the
  2-process run once its step 1 is logged."""
  port = _free_port()
  multi = dict(AGENTRL_COORDINATOR=f"127.0.0.1:{port}", AGENTRL_NUM_PROCESSES="2")
  multi.update(AGENTRL_CPU_DEVICES="2")
  procs = [
    _launch(tmp, "one", one, XLA_FLAGS="--xla_force_host_platform_device_count=4"),
    _launch(tmp, "leader", two, AGENTRL_PROCESS_ID="0", **multi),
    _launch(tmp, "follower", two, AGENTRL_PROCESS_ID="1", **multi),
  ]
  deadline, signalled = time.monotonic() + 900, False
  try:
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
      if any(p.poll() not in (None, 0, EXIT_INTERRUPTED) for p in procs):
        break
      if not signalled and any(m["step"] == 1 for m in _metrics(two)):
        procs[2].send_signal(signal.SIGTERM)
        signalled = True
      time.sleep(0.2)
  finally:
    for p in procs:  # only the processes this test started
      if p.poll() is None:
        p.kill()
      p.wait()
  assert signalled, "the 2-process run never logged step 1"
  # Process 0 stops preempted (130, as launch.train after a SIGTERM); the 1-process run and
  # the follower, whose summary carries only its step and digest, end with 0.
  return [_summary(p, rc) for p, rc in zip(procs, (0, EXIT_INTERRUPTED, 0), strict=True)]


def _metrics(workdir: pathlib.Path) -> list[dict]:
  return read_metrics(workdir) if (workdir / "metrics.jsonl").exists() else []


def _sft_nll(workdir: pathlib.Path) -> list[float]:
  return [r["sft/nll"] for r in read_metrics(workdir, key="sft_step")]


def _final_params(workdir: pathlib.Path, step: int):
  """The step's checkpointed params, restored on a data=2 x fsdp=2 mesh of this process."""
  from configs import toy
  from parallel.mesh import make_mesh
  from rl.config import to_experiment
  from rl.runtime.checkpoint import Checkpointer
  from rl.train_state import create_train_state

  exp = to_experiment(toy.get_config())
  train = dataclasses.replace(exp.train, mesh=dataclasses.replace(exp.train.mesh, data=2, fsdp=2))
  mesh = make_mesh(train.mesh, jax.devices()[:4])
  template, _ = create_train_state(exp.model, train, mesh, jax.random.key(0))
  ckpt = Checkpointer(workdir / "checkpoints")
  try:
    state, _ = ckpt.restore(template, step)
  finally:
    ckpt.close()
  return jax.device_get(state.params)


def test_two_processes_train_like_one(tmp_path):
  one, two = tmp_path / "one", tmp_path / "two"
  s_one, s_leader, s_follower = _run_all(tmp_path, one, two)

  # The SIGTERM of process 1 stopped both at the same step boundary, with a checkpoint there.
  steps = s_leader["step"]
  assert s_leader["preempted"] and 1 <= steps <= STEPS
  assert s_follower == {
    "step": steps,
    "process": 1,
    "params_digest": s_leader["params_digest"],
  }
  assert s_one["step"] == STEPS and not s_one["preempted"] and "params_digest" not in s_one

  # Only process 0 wrote telemetry and the trajectory store: one record per warm-start step,
  # then one per RL step.
  lines = [json.loads(x) for x in (two / "metrics.jsonl").read_text().splitlines()]
  assert [x.get("sft_step", x.get("step")) for x in lines] == [0, 1, *range(1, steps + 1)]
  m_one, m_two = _metrics(one), _metrics(two)

  # The warm start: the same supervised steps on process 0's demonstrations in both runs, and
  # they lowered the loss (the first RL step starts from the warm-started weights).
  sft_one, sft_two = (_sft_nll(w) for w in (one, two))
  np.testing.assert_allclose(sft_two, sft_one, rtol=1e-5)
  assert len(sft_one) == 2 and sft_one[1] < sft_one[0]
  b_one = TrajectoryStore(one).read_batches(max_step=steps)
  b_two = TrajectoryStore(two).read_batches()
  pairs = lambda t: list(
    zip(t.column("step").to_pylist(), t.column("trajectory_id").to_pylist(), strict=True)
  )
  assert len(pairs(b_two)) == steps * 2 * 2  # 2 groups x 2 samples per step
  assert pairs(b_two) == pairs(b_one)

  for a, b in zip(m_one[:steps], m_two, strict=True):
    assert a["step"] == b["step"]
    assert abs(a["train/loss"]) > 1e-3  # the entropy term: a real update
    np.testing.assert_allclose(b["train/loss"], a["train/loss"], rtol=1e-5)
    np.testing.assert_allclose(b["train/grad_norm"], a["train/grad_norm"], rtol=1e-4)

  p_one, p_two = _final_params(one, steps), _final_params(two, steps)
  p_start = _final_params(one, 0)
  leaves = zip(jax.tree.leaves(p_one), jax.tree.leaves(p_start), strict=True)
  assert max(float(np.abs(a - b).max()) for a, b in leaves) > 1e-5  # the updates moved them
  for a, b in zip(jax.tree.leaves(p_one), jax.tree.leaves(p_two), strict=True):
    np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
