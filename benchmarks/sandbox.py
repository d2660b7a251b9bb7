"""Sandbox latency and throughput, bubblewrap vs Docker, measured in one run.

Per backend: create + exec(`true`) + close latency (p50, p99) over sequential cycles;
sandboxes/s at concurrency 1 and 8 (each sandbox: create, exec `true`, close); snapshot +
restore of a 10 MB workspace (p50); each in both sandbox modes (`--modes`: container,
readonly). Then the bwrap/docker ratios and, per backend, container/readonly (the new mode's
cost against the old one, measured in the same run). Targets (2-core machine):
bwrap p50 <= 30 ms and >= 40 sandboxes/s at concurrency 8; docker p50 <= 600 ms; bwrap
snapshot+restore <= 100 ms. Reference points: E2B create+exec+close p50 442 ms, Daytona 663 ms.

  python benchmarks/sandbox.py                        # both backends (Docker if reachable)
  python benchmarks/sandbox.py --backends=bwrap --cycles=200 --json=/tmp/sandbox.json

Needs the task image (`python -m launch.build_image`). The machine's load is printed with
the results: on a shared machine, latencies grow with the load average.
"""

from __future__ import annotations

import json
import os
import pathlib
import sys
import time
from concurrent.futures import ThreadPoolExecutor

from absl import app, flags

flags.DEFINE_list("backends", ["bwrap", "docker"], "backends to measure")
flags.DEFINE_list("modes", ["container", "readonly"], "SandboxSpec.mode values to measure")
flags.DEFINE_integer("cycles", 50, "sequential create+exec+close cycles (latency, conc. 1)")
flags.DEFINE_integer("conc_cycles", 48, "sandboxes made at concurrency 8")
flags.DEFINE_integer("snapshots", 10, "snapshot+restore repetitions")
flags.DEFINE_string("json", None, "also write the results here")
FLAGS = flags.FLAGS
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from a checkout

TARGETS = {
  "bwrap": {"p50_ms": 30.0, "conc8_per_s": 40.0, "snap_ms": 100.0},
  "docker": {"p50_ms": 600.0},
}


_MODE = ["container"]  # the mode being measured


def _pct(xs: list[float], q: float) -> float:
  xs = sorted(xs)
  return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def _cycle(backend: str) -> float:
  from envs import sandbox

  t = time.perf_counter()
  with sandbox.make(backend, sandbox.SandboxSpec(mode=_MODE[0])) as sb:
    r = sb.exec("true")
  assert r.exit_code == 0, r
  return time.perf_counter() - t


def _throughput(backend: str, n: int, workers: int) -> float:
  t = time.perf_counter()
  with ThreadPoolExecutor(workers) as ex:
    list(ex.map(lambda _: _cycle(backend), range(n)))
  return n / (time.perf_counter() - t)


def _snapshot_restore(backend: str, reps: int) -> float:
  from envs import sandbox

  with sandbox.make(backend, sandbox.SandboxSpec(mode=_MODE[0])) as sb:
    for i in range(10):
      sb.write_file(f"data/f{i}.bin", os.urandom(1 << 20))
    times = []
    for _ in range(reps):
      t = time.perf_counter()
      snap = sb.snapshot()
      sb.restore(snap)
      times.append(time.perf_counter() - t)
  return _pct(times, 0.5)


class _CpuMeter:
  """CPU time of this process and everything it starts, via a cgroup-v1 cpuacct group (root
  only). Sandbox processes stay in it (they move in the memory/pids/cpu/freezer trees only);
  Docker's containers are the daemon's children, so their CPU is not counted."""

  def __init__(self):
    self.dir = pathlib.Path(f"/sys/fs/cgroup/cpuacct/agentrl-bench-{os.getpid()}")
    try:
      self.dir.mkdir()
      (self.dir / "cgroup.procs").write_text(str(os.getpid()))
    except OSError:
      self.dir = None

  def ns(self) -> int | None:
    return int((self.dir / "cpuacct.usage").read_text()) if self.dir else None

  def close(self) -> None:
    if self.dir:
      pathlib.Path("/sys/fs/cgroup/cpuacct/cgroup.procs").write_text(str(os.getpid()))
      self.dir.rmdir()


def measure(backend: str, meter: _CpuMeter) -> dict:
  _cycle(backend)  # warm-up (image import, caches)
  c0 = meter.ns()
  lat = [_cycle(backend) for _ in range(FLAGS.cycles)]
  cpu = (meter.ns() - c0) / 1e6 / len(lat) if c0 is not None else float("nan")
  return {
    "cpu_ms": cpu,
    "p50_ms": 1e3 * _pct(lat, 0.5),
    "p99_ms": 1e3 * _pct(lat, 0.99),
    "conc1_per_s": len(lat) / sum(lat),
    "conc8_per_s": _throughput(backend, FLAGS.conc_cycles, 8),
    "snap_ms": 1e3 * _snapshot_restore(backend, FLAGS.snapshots),
  }


def _available(backend: str) -> str | None:
  if backend != "docker":
    return None
  from envs.sandbox import testing

  return testing.docker_unavailable()


def main(argv):
  del argv
  res, meter = {}, _CpuMeter()
  try:
    for b in FLAGS.backends:
      if why := _available(b):
        print(f"{b}: skipped ({why})")
        continue
      for m in FLAGS.modes:
        _MODE[0] = m
        res[f"{b}/{m}"] = measure(b, meter)
  finally:
    meter.close()
  load = os.getloadavg()
  print(f"machine: {os.cpu_count()} CPUs, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
  head = (
    f"{'backend/mode':18} {'p50 ms':>8} {'p99 ms':>8} {'c1 /s':>7} {'c8 /s':>7} {'snap+rst ms':>12}"
  )
  print(head + "  cpu ms/cycle (excl. daemons)")
  for b, r in res.items():
    print(
      f"{b:18} {r['p50_ms']:8.1f} {r['p99_ms']:8.1f} {r['conc1_per_s']:7.1f} "
      f"{r['conc8_per_s']:7.1f} {r['snap_ms']:12.1f}  {r['cpu_ms']:.1f}"
    )
    for k, target in TARGETS.get(b.split("/")[0], {}).items():
      ok = r[k] <= target if k.endswith("_ms") else r[k] >= target
      print(
        f"  target {k} {'<=' if k.endswith('_ms') else '>='} {target:g}: {r[k]:.1f} {'met' if ok else 'MISSED'}"
      )
  pairs = [(f"docker/{m}", f"bwrap/{m}") for m in FLAGS.modes]
  pairs += [(f"{b}/container", f"{b}/readonly") for b in FLAGS.backends]
  for a, b in pairs:  # same-run ratios a / b
    if a in res and b in res:
      x, y = res[a], res[b]
      print(
        f"{a} / {b}: latency p50 x{x['p50_ms'] / y['p50_ms']:.2f}, throughput c8 "
        f"x{x['conc8_per_s'] / y['conc8_per_s']:.2f}, snapshot+restore x{x['snap_ms'] / y['snap_ms']:.2f}"
      )
  if FLAGS.json:
    pathlib.Path(FLAGS.json).write_text(json.dumps({"load": load, "results": res}, indent=1))


if __name__ == "__main__":
  app.run(main)
