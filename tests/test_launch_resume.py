"""`kill -9` of the real entry point mid-run, then resume: the same trajectory ids are trained,
none lost, none twice; Ctrl-C (SIGINT) checkpoints at the next step boundary, exits cleanly
and prints the resume command. Real sandboxes, orbax, Parquet."""

import os
import pathlib
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest
from procs import with_parent

from rl.runtime.trajectory_store import TrajectoryStore

ROOT = pathlib.Path(__file__).resolve().parents[1]
# A small sync run: 2 groups x 2 samples per step, checkpoints every 2 steps, dynamic sampling
# on with a budget of 2 drops per step (drops and replacements must also replay identically).
OVERRIDES = [
  "--config.loop.steps=5",
  "--config.loop.checkpoint_every=2",
  "--config.loop.batch_groups=2",
  "--config.rollout.group_size=2",
  "--config.rollout.dynamic_sampling=True",
  "--config.rollout.max_drop_factor=1",
  "--config.sft.steps=3",
  "--config.sft.demos=4",
  "--config.sft.batch_size=4",
]

# RFT trains only successes: a longer warm start makes the toy policy pass some episodes.
ALGORITHM = {"grpo": [], "rft": ["--config.loop.algorithm=rft", "--config.sft.steps=80"]}


def _launch(workdir, cache, log, algorithm="grpo"):
  env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_COMPILATION_CACHE_DIR=str(cache))
  env.pop("XLA_FLAGS", None)  # one CPU device, like a user's run
  cmd = [sys.executable, "-m", "launch.train", "--config=configs/toy.py", f"--workdir={workdir}"]
  proc = subprocess.Popen(
    with_parent([*cmd, *OVERRIDES, *ALGORITHM[algorithm]]),
    stdout=log,
    stderr=subprocess.STDOUT,
    env=env,
    cwd=ROOT,
  )
  proc.started = time.time()
  return proc


def _wait_for(path: pathlib.Path, proc, timeout=400):
  """Until `proc` itself has written `path` (a file left by an earlier life does not count)."""
  deadline = time.monotonic() + timeout
  while not (path.exists() and path.stat().st_mtime >= proc.started):
    assert proc.poll() is None, f"the run exited early with {proc.returncode}"
    assert time.monotonic() < deadline, f"timed out waiting for {path}"
    time.sleep(0.05)


def _trained(workdir):
  table = TrajectoryStore(workdir).read_batches()
  return list(
    zip(table.column("step").to_pylist(), table.column("trajectory_id").to_pylist(), strict=True)
  )


@pytest.mark.parametrize("algorithm", ["grpo", "rft"])
def test_kill9_resume_trains_exactly_the_same_trajectories(tmp_path, algorithm):
  cache = tmp_path / "jax_cache"
  a_dir, b_dir = tmp_path / "uninterrupted", tmp_path / "killed"
  procs = []
  try:
    _runs(tmp_path, cache, a_dir, b_dir, procs, algorithm)
  finally:
    for p in procs:  # only the runs this test started
      if p.poll() is None:
        p.kill()
        p.wait()
  _compare(a_dir, b_dir, algorithm)


def _runs(tmp_path, cache, a_dir, b_dir, procs, algorithm):
  launch = lambda d, log: procs.append(_launch(d, cache, log, algorithm)) or procs[-1]
  with open(tmp_path / "a.log", "w") as la, open(tmp_path / "b.log", "w") as lb:
    a = launch(a_dir, la)
    b = launch(b_dir, lb)
    # Kill B once step 3 has trained: a checkpoint (step 2) exists, work of step 4 is in flight.
    _wait_for(b_dir / "batches" / "step-00000003.parquet", b)
    b.send_signal(signal.SIGKILL)
    assert b.wait() == -signal.SIGKILL
    assert not (b_dir / "summary.json").exists()
    b = launch(b_dir, lb)  # resume, then Ctrl-C: it must checkpoint, exit 130, say how to resume
    _wait_for(b_dir / "batches" / "step-00000004.parquet", b)
    b.send_signal(signal.SIGINT)
    assert b.wait(timeout=300) == 130, (tmp_path / "b.log").read_text()[-3000:]
    log = (tmp_path / "b.log").read_text()
    assert "resumed from step 2 of 5" in log and "Traceback" not in log, log[-3000:]
    assert (
      f"resume with:\n  python -m launch.train --config=configs/toy.py --workdir={b_dir}" in log
    )
    saved = sorted(int(p.name) for p in (b_dir / "checkpoints").iterdir() if p.name.isdigit())
    assert saved[-1] >= 4, saved  # the step boundary after the Ctrl-C was saved
    b = launch(b_dir, lb)  # resume to the end
    assert b.wait(timeout=400) == 0, (tmp_path / "b.log").read_text()[-3000:]
    assert f"resumed from step {saved[-1]} of 5" in (tmp_path / "b.log").read_text()
    assert a.wait(timeout=400) == 0, (tmp_path / "a.log").read_text()[-3000:]


def _compare(a_dir, b_dir, algorithm):
  ta, tb = _trained(a_dir), _trained(b_dir)
  ids_b = [t for _, t in tb]
  assert len(ids_b) == len(set(ids_b)), "a trajectory was trained twice"
  assert sorted(ta) == sorted(tb), "resumed run trained on different trajectories"
  if algorithm == "grpo":
    assert {s for s, _ in ta} == {1, 2, 3, 4, 5} and len(ta) == 5 * 2 * 2
  else:  # RFT trains the distinct successes only (tests/test_loop_rft.py); some step had one
    rows = {r["trajectory_id"]: r for r in TrajectoryStore(b_dir).read().to_pylist()}
    assert ta and all(rows[t]["passed"] for t in ids_b)
    steps = sorted(int(f.stem.split("-")[1]) for f in (b_dir / "batches").glob("step-*"))
    assert steps == [1, 2, 3, 4, 5]
  assert not (b_dir / "warm_start").exists()  # RL's checkpoints took over from the warm start's
  events = (b_dir / "events.jsonl").read_text()
  assert events.count('"kind": "resume"') == 2
  # Every trained trajectory is in the Parquet store, with identical tokens in both runs.
  for run in (a_dir, b_dir):
    store = TrajectoryStore(run).read(["trajectory_id"]).column("trajectory_id").to_pylist()
    assert set(ids_b) <= set(store)
  tok = lambda d, gid: pq.read_table(d / "trajectories" / f"group-{gid:09d}.parquet")[
    "tokens"
  ].to_pylist()
  gids = sorted({int(t[1:8]) for t in ids_b})
  assert all(tok(a_dir, g) == tok(b_dir, g) for g in gids)
