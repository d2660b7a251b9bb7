"""`python -m launch.train --config.cluster=ray` end to end on a local Ray cluster (127.0.0.1).

The toy experiment (real bwrap sandboxes and verifier, tiny byte model, no warm start) trains
4 sync steps with its rollouts on 2 Ray worker actors, on one task whose hidden test takes 3 s
(as real tasks' tests do): every episode then holds its worker for seconds, so the kill cannot
miss them (with the toy's millisecond episodes a run once finished before a worker was seen
mid-episode). Once the first update is done, one worker process is SIGKILLed while it runs an
episode. The run must finish its steps; the killed worker's episodes are re-run on the other
worker (events.jsonl), the worker is replaced, no trajectory is lost or trained twice, and every
update's weights reach the workers: each broadcast is answered with the new version by every
worker, and the tokens of step k were sampled at version k - 1.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

from procs import with_parent
from task_files import write

from envs.sandbox.testing import descendants, sandbox_image  # noqa: F401
from rl.runtime.trajectory_store import TrajectoryStore

REPO = pathlib.Path(__file__).resolve().parents[1]
STEPS, GROUPS, SAMPLES = 4, 2, 2
OVERRIDES = [
  "--config.cluster=ray",
  "--config.ray.num_workers=2",
  "--config.ray.num_cpus=2",
  "--config.ray.worker_num_cpus=0.5",
  f"--config.loop.steps={STEPS}",
  f"--config.loop.batch_groups={GROUPS}",
  f"--config.rollout.group_size={SAMPLES}",
  "--config.rollout.dynamic_sampling=False",  # every finished group is trained
  "--config.loop.checkpoint_every=2",
  "--config.sft.steps=0",
]


SLOW_TASK = {
  "task.toml": 'id = "slow_echo"\ndomain = "text"\ndifficulty = 1\n[timeouts]\nagent_s = 60\ntest_s = 60\n',
  "instruction.md": "Create a file named out.txt containing exactly the word hi.\n",
  "solution/solve.sh": "echo hi > out.txt\n",
  "tests/test_out.py": (
    "import pathlib\nimport time\n\n\ndef test_out():\n  time.sleep(3)\n"
    "  assert pathlib.Path('out.txt').read_text().strip() == 'hi'\n"
  ),
}


def _titles(root: int) -> dict[int, str]:
  """argv[0] of each process under `root` (Ray sets actors' to `ray::<Class>[.<method>]`)."""
  out = {}
  for pid in descendants(root):
    try:
      out[pid] = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
      pass
  return out


def _workers_in_an_episode(root: int) -> list[int]:
  """Ray actor processes with a live bubblewrap sandbox below them: an episode is running (a
  sandbox lives from an episode's start to its grade). Not the title `ray::RolloutWorker.run`:
  in a threaded actor the title is that of whichever call started or ended last, and the
  fleet's control calls (`running`, `load_params`) overwrite it while an episode runs."""
  titles = _titles(root)
  return [
    p
    for p, t in titles.items()
    if t.startswith("ray::") and any(titles.get(c, "").endswith("bwrap") for c in descendants(p))
  ]


def _kill_a_worker_mid_episode(proc, workdir: pathlib.Path, timeout_s: float = 400) -> int:
  """After step 1, SIGKILLs a rollout worker actor while it runs an episode; returns its pid."""
  deadline = time.monotonic() + timeout_s
  step1 = workdir / "batches" / "step-00000001.parquet"
  last = workdir / "batches" / f"step-{STEPS:08d}.parquet"
  while time.monotonic() < deadline:
    assert proc.poll() is None, f"the run exited early with {proc.returncode}"
    # After the last update the rollouts still running are not needed (the run is closing), so
    # a worker killed then has nothing to retry: kill only between step 1 and the last step.
    assert not last.exists(), "the run reached its last step before a worker could be killed"
    if step1.exists():
      busy = _workers_in_an_episode(proc.pid)
      if busy and not last.exists():
        os.kill(busy[0], signal.SIGKILL)
        return busy[0]
    time.sleep(0.02)
  raise AssertionError("no rollout worker was seen running an episode after step 1")


def _events(workdir: pathlib.Path) -> list[dict]:
  return [json.loads(line) for line in (workdir / "events.jsonl").read_text().splitlines()]


def test_launch_train_on_ray_survives_a_killed_worker(tmp_path, sandbox_image):  # noqa: F811
  workdir = tmp_path / "run"
  env = dict(os.environ, PYTHONPATH=str(REPO), JAX_COMPILATION_CACHE_DIR=str(tmp_path / "jax"))
  env.pop("XLA_FLAGS", None)  # one CPU device for the trainer, like a user's run
  tasks = tmp_path / "tasks"
  write(tasks / "slow", SLOW_TASK)
  cmd = [sys.executable, "-m", "launch.train", "--config=configs/toy.py", f"--workdir={workdir}"]
  cmd.append(f"--config.env.tasks={tasks}")
  with open(tmp_path / "run.log", "w+") as log:
    # Own session: if the test fails, the run and its Ray processes go down together.
    proc = subprocess.Popen(
      with_parent(cmd + OVERRIDES), cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
      start_new_session=True,
    )  # fmt: skip
    try:
      victim = _kill_a_worker_mid_episode(proc, workdir)
      rc = proc.wait(timeout=600)
    finally:
      if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    log.seek(0)
    out = log.read()
  assert rc == 0, out[-4000:]
  assert not pathlib.Path(f"/proc/{victim}").exists()
  assert json.loads((workdir / "summary.json").read_text())["step"] == STEPS
  assert "Traceback" not in out, out[-4000:]  # nor a rollout thread failing at shutdown

  # Nothing lost, nothing trained twice.
  store = TrajectoryStore(workdir)
  batches = store.read_batches().to_pylist()
  ids = [b["trajectory_id"] for b in batches]
  assert len(ids) == len(set(ids)) == STEPS * GROUPS * SAMPLES
  assert {b["step"] for b in batches} == set(range(1, STEPS + 1))
  rows = {r["trajectory_id"]: r for r in store.read().to_pylist()}
  assert set(ids) <= set(rows)

  # The killed worker's episodes were re-run on the other worker, and the worker was replaced.
  events = _events(workdir)
  died = [e for e in events if e["kind"] == "ray_worker_died"]
  assert died, "the killed worker was running no episode of the fleet"
  (dead,) = {e["worker"] for e in died}
  retried = {e["trajectory_id"]: e for e in events if e["kind"] == "ray_episode_retried"}
  trained = set(ids)
  assert any(e["trajectory_id"] in trained for e in died), died  # the kill hit a needed episode
  for e in died:
    if e["trajectory_id"] not in trained:  # a group started for a step the run never took
      assert int(e["trajectory_id"][1:8]) >= STEPS * GROUPS, e
      continue
    assert e["trajectory_id"] in retried and retried[e["trajectory_id"]]["worker"] != dead
    assert not rows[e["trajectory_id"]]["infra_error"]  # it finished, and is in the store
  (replaced,) = [e for e in events if e["kind"] == "ray_worker_replaced"]
  assert replaced["worker"] == dead and replaced["by"] != dead

  # Weights: the initial load and one broadcast per update, each answered by every live worker
  # with the new version, and the tokens trained at step k were sampled at version k - 1 (also
  # by the replacement, which catches up with broadcasts made while it was starting).
  broadcasts = [e for e in events if e["kind"] == "ray_weights"]
  assert [b["version"] for b in broadcasts] == list(range(STEPS + 1))
  for b in broadcasts:
    assert b["workers"] and set(b["workers"].values()) == {b["version"]}
  for b in batches:
    r = rows[b["trajectory_id"]]
    sampled = {v for v, m in zip(r["versions"], r["loss_mask"], strict=True) if m}
    assert sampled == {b["step"] - 1}, (b, sampled)
