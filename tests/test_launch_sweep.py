"""A real `launch.sweep` of two tiny toy runs (2 at once), then the same sweep again.

One sweep covers several README features through the real entry points (subprocesses,
bwrap sandboxes, orbax, tensorboardX): results.csv / .md / .png, --parallel, finished runs
skipped on a second sweep, loop.updates_per_batch through the host loop (the grid: with a
linear lr warmup, the logged lr counts optimizer steps), loop.replay_groups (the replay
buffer, in the checkpoint's host state, holds the trained groups with reward variance),
TensorBoard event files holding the same scalars as metrics.jsonl, and training on Docker
sandboxes (env.backend=docker; bwrap where no daemon answers, except under CI=true, which
fails then: the other toy runs train on bwrap).
"""

import csv
import json
import os
import pathlib
import struct
import subprocess
import sys

import numpy as np
from tensorboardX.proto import event_pb2

from envs.sandbox import testing
from rl.runtime.trajectory_store import TrajectoryStore

ROOT = pathlib.Path(__file__).resolve().parents[1]
SETS = {
  "loop.steps": 2,
  "loop.batch_groups": 2,
  "loop.checkpoint_every": 1,
  "loop.replay_groups": 2,
  "rollout.group_size": 2,
  "sft.steps": 2,
  "sft.demos": 2,
  "sft.batch_size": 2,
  "train.optim.warmup_steps": 8,  # lr = step / 8 * lr: the lr tells how many updates ran
}


def _backend() -> str:
  if testing.docker_unavailable() and not testing.under_ci():
    return "bwrap"
  testing.require_docker()  # fails under CI=true without a daemon
  return "docker"


def _sweep(workdir, backend):
  cmd = [sys.executable, "-m", "launch.sweep", "--config=configs/toy.py", f"--workdir={workdir}"]
  cmd += ["--grid=loop.updates_per_batch=1,2", "--parallel=2"]
  cmd += [f"--set={k}={v}" for k, v in {**SETS, "env.backend": backend}.items()]
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  env.pop("XLA_FLAGS", None)  # one CPU device, like a user's run
  return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)


def _tb_scalars(run: pathlib.Path) -> dict[tuple[int, str], float]:
  """Every scalar of the run's TFRecord event files (8-byte length, 4-byte crc, data, crc)."""
  out = {}
  for f in (run / "tb").glob("events.out.tfevents.*"):
    data, i = f.read_bytes(), 0
    while i < len(data):
      (n,) = struct.unpack("<Q", data[i : i + 8])
      ev = event_pb2.Event.FromString(data[i + 12 : i + 12 + n])
      i += 12 + n + 4
      for v in ev.summary.value:
        out[ev.step, v.tag] = v.simple_value
  return out


def _span(run: pathlib.Path) -> tuple[float, float]:
  """The wall-clock times of a run's first and last records (events.jsonl, metrics.jsonl)."""
  times = [
    json.loads(x)["time"]
    for name in ("events.jsonl", "metrics.jsonl")
    for x in (run / name).read_text().splitlines()
  ]
  return min(times), max(times)


def _cols(store):
  t = store.read_batches()
  return t.column("group_id").to_pylist(), t.column("replayed").to_pylist()


def test_sweep_runs_writes_results_and_skips_finished_runs(tmp_path):
  backend = _backend()
  p = _sweep(tmp_path, backend)
  assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
  runs = {r: tmp_path / r for r in ("updates_per_batch=1", "updates_per_batch=2")}
  with open(tmp_path / "results.csv") as f:
    rows = list(csv.DictReader(f))
  assert [r["run"] for r in rows] == list(runs)
  assert all(r["returncode"] == "0" for r in rows), rows
  md = (tmp_path / "results.md").read_text()
  assert all(name in md for name in runs)
  assert (tmp_path / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert p.stdout.count("[sweep] ") == 2  # two starts (2 at once) and a line as each finished:
  assert p.stdout.count(": done in ") == 2 and "train pass last" in p.stdout, p.stdout[-3000:]
  # --parallel=2: the sweep started both runs before either finished, and the runs' own
  # records (first to last wall-clock time of events.jsonl and metrics.jsonl) overlap
  assert p.stdout.rindex("[sweep] ") < p.stdout.index(": done in "), p.stdout[-3000:]
  spans = [_span(r) for r in runs.values()]
  assert max(a for a, _ in spans) < min(b for _, b in spans), spans

  for run in runs.values():  # trained on the chosen backend's sandboxes
    assert json.loads((run / "experiment.json").read_text())["env"]["backend"] == backend
  lr, metrics = {}, {}
  for name, run in runs.items():
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    metrics[name] = [r for r in recs if "train/lr" in r]
    lr[name] = [r["train/lr"] for r in metrics[name]]
  # train/lr is the lr of each batch's last update: lr * (optimizer steps before it) / 8, and
  # updates_per_batch=2 runs two optimizer steps per batch
  for name, steps_before in (("updates_per_batch=1", [0, 1]), ("updates_per_batch=2", [1, 3])):
    np.testing.assert_allclose(lr[name], [5e-4 * n / 8 for n in steps_before], rtol=1e-6)

  # TensorBoard holds the scalars metrics.jsonl has (same steps, same values)
  run = runs["updates_per_batch=2"]
  tb = _tb_scalars(run)
  for r in metrics["updates_per_batch=2"]:
    assert abs(tb[r["step"], "train/lr"] - r["train/lr"]) <= 1e-6 * abs(r["train/lr"])

  # the replay buffer is saved with the host state: exactly the trained groups whose rewards
  # vary (at this size and training the policy seldom passes, so it is often empty; the
  # replayed groups and the buffer's resume are tested in tests/test_trainer_replay.py)
  hosts = sorted((run / "checkpoints").glob("*/host/metadata"))
  assert hosts, list((run / "checkpoints").rglob("*"))[:20]
  host = json.loads(hosts[-1].read_text())
  store = TrajectoryStore(run)
  trained = {g for g, rep in zip(*_cols(store), strict=True) if not rep}
  varied = {g for g in trained if len({r["reward"] for r in store.read_group(g)}) > 1}
  assert sorted(g["group_id"] for g in host["replay"]) == sorted(varied)

  # a second sweep finds both runs finished and runs nothing
  before = {n: (r / "summary.json").stat().st_mtime for n, r in runs.items()}
  again = _sweep(tmp_path, backend)
  assert again.returncode == 0, again.stderr[-2000:]
  assert "[sweep] " not in again.stdout and again.stdout.count("finished before, skipped") == 2
  assert {n: (r / "summary.json").stat().st_mtime for n, r in runs.items()} == before


def test_a_preempted_run_is_not_finished(tmp_path):
  from launch import sweep

  assert not sweep.finished(tmp_path)  # no summary.json
  (tmp_path / "summary.json").write_text(json.dumps({"step": 2, "preempted": True}))
  assert not sweep.finished(tmp_path)  # run again: it resumes
  (tmp_path / "summary.json").write_text(json.dumps({"step": 5, "preempted": False}))
  assert sweep.finished(tmp_path)
