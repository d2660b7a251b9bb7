"""Async correctness across kill -9: a real subprocess running the async loop (tests/async_harness:
the real RolloutManager, StalenessBuffer and TrajectoryStore, checkpointing the in-flight
accounting after every step) is SIGKILLed mid-run and resumed from its last checkpoint. No
trajectory is trained twice, none is lost, and every trained token is within the cap."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import async_harness as h
from procs import with_parent

from rl.runtime.trajectory_store import TrajectoryStore

HARNESS = pathlib.Path(h.__file__)
CAP, STEPS = 3, 30  # as in async_harness.main: eta 2, cap 3, 3 groups per batch


def _start(wd, steps):
  return subprocess.Popen(
    with_parent([sys.executable, str(HARNESS), str(wd), str(steps)]),
    stdout=subprocess.PIPE,
    stderr=subprocess.STDOUT,
  )


def _wait_for_step(wd, proc, step, timeout=120.0):
  """Waits (polling the checkpoint file) until the run has checkpointed `step`; fails loudly."""
  ckpt, deadline = wd / "ckpt.json", time.monotonic() + timeout
  while time.monotonic() < deadline:
    if ckpt.is_file() and json.loads(ckpt.read_text())["step"] >= step:
      return
    assert proc.poll() is None, proc.stdout.read().decode()
    time.sleep(0.02)
  raise AssertionError(f"the harness did not reach step {step} in {timeout} s")


def test_kill9_and_resume_lose_and_repeat_nothing(tmp_path):
  first = _start(tmp_path, STEPS)
  _wait_for_step(tmp_path, first, 8)
  os.kill(first.pid, signal.SIGKILL)
  first.wait()
  assert first.returncode == -signal.SIGKILL
  killed_at = json.loads((tmp_path / "ckpt.json").read_text())["step"]
  assert killed_at < STEPS  # it really died mid-run
  second = _start(tmp_path, STEPS)
  out = second.communicate(timeout=300)[0].decode()
  assert second.returncode == 0, out

  store = TrajectoryStore(tmp_path)
  batches = store.read_batches().to_pylist()
  assert sorted({b["step"] for b in batches}) == list(range(1, STEPS + 1))
  ids = [b["trajectory_id"] for b in batches]
  assert len(ids) == STEPS * 3 * 2 and len(set(ids)) == len(ids)  # nothing repeated
  rows = {r["trajectory_id"]: r for r in store.read().to_pylist()}
  for b in batches:  # the per-token cap, before and after the kill
    r = rows[b["trajectory_id"]]
    assert all(
      b["step"] - 1 - v <= CAP for v, m in zip(r["versions"], r["loss_mask"], strict=True) if m
    )
  # Nothing lost: every issued group is trained, or still buffered / in flight at the end.
  snap = json.loads((tmp_path / "ckpt.json").read_text())["rollout"]
  trained = {b["group_id"] for b in batches}
  pending = {g["group_id"] for g in snap["buffer"]} | {int(k) for k in snap["inflight"]}
  assert trained.isdisjoint(pending)
  assert trained | pending == set(range(snap["next_group_id"]))
