"""The sandbox's CPU limit (the kernel throttles a busy loop over its quota) and the environment
variables that steer the backends: AGENTRL_CGROUP, AGENTRL_RUNTIME, AGENTRL_UIDRANGE_BASE.

The variables are read once per process, so each case runs in a fresh subprocess that makes
a real bubblewrap sandbox and prints what it observed."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile

import pytest

from envs.sandbox import cgroups, testing

backend, sandbox_image = testing.backend, testing.sandbox_image  # fixtures
ROOT = pathlib.Path(__file__).resolve().parents[1]
# A quota of 2 ms of CPU per 100 ms period against a busy loop (python's start-up and 10 ms of
# spinning): the sandbox's cgroup competes as one entity, so its fair share on a loaded host
# is about 2 cores / load, still above the quota up to a load of ~100.
SPIN = "python3 -c 'import time\nwhile time.process_time() < 0.01: pass'"


def _throttled(stat: str) -> int:
  return int(dict(line.split() for line in stat.splitlines())["nr_throttled"])


def test_cpu_limit_throttles_a_busy_loop(backend):
  sb = testing.make(backend, cpus=0.02)
  try:
    if backend == "docker":  # the container's own cgroup, as mounted inside (v1 or v2)
      stat = "cat /sys/fs/cgroup/cpu/cpu.stat 2>/dev/null || cat /sys/fs/cgroup/cpu.stat"
      assert sb.exec(SPIN).exit_code == 0
      after = _throttled(sb.exec(stat).stdout)
    else:
      support = cgroups.detect()
      if "cpu" not in support.limits:
        pytest.skip(f"no cgroup cpu controller here ({support.mode})")
      parent = dict(support.v1_parents).get("cpu") or support.track_parent
      d = parent / sb.name
      quota = (d / "cpu.cfs_quota_us").read_text() if (d / "cpu.cfs_quota_us").exists() else ""
      assert quota.strip() == "2000" or (d / "cpu.max").read_text().split()[0] == "2000"
      assert sb.exec(SPIN).exit_code == 0
      after = _throttled((d / "cpu.stat").read_text())
  finally:
    sb.close()
  assert after > 0  # the group ran into its quota (without one, never)


PROBE = r"""
import json, os, pathlib
from envs.sandbox import testing
sb = testing.make("bwrap", mode=os.environ.get("MODE", "readonly"))
r = sb.exec("sleep 30 & echo started")
kids = testing.descendants(os.getpid())
uids = sorted({int(l.split()[1]) for k in kids for l in
  pathlib.Path(f"/proc/{k}/status").read_text().splitlines() if l.startswith("Uid:")})
snap = sb.snapshot()
print(json.dumps(dict(limits=sorted(sb.limits_via), snapshot=snap, uids=uids, out=r.stdout)))
sb.close()
"""


@pytest.fixture
def runtime():
  """A fresh AGENTRL_RUNTIME folder that sandbox uids can traverse (pytest's tmp_path is 0700)."""
  d = pathlib.Path(tempfile.mkdtemp(prefix="agentrl-test-runtime-"))
  yield d
  shutil.rmtree(d, ignore_errors=True)


def _probe(runtime, **env) -> dict:
  e = dict(os.environ, PYTHONPATH=str(ROOT), AGENTRL_RUNTIME=str(runtime), **env)
  p = subprocess.run(
    [sys.executable, "-c", PROBE], cwd=ROOT, env=e, capture_output=True, text=True, timeout=120
  )
  assert p.returncode == 0, p.stderr[-2000:]
  return json.loads(p.stdout.strip().splitlines()[-1])


def test_agentrl_runtime_and_agentrl_cgroup(sandbox_image, runtime):
  auto = _probe(runtime)
  snap = pathlib.Path(auto["snapshot"])
  assert snap.is_relative_to(runtime) and not snap.exists(), snap  # close() removed it
  assert auto["out"] == "started\n"
  if not auto["limits"]:
    pytest.skip("no usable cgroups on this machine: AGENTRL_CGROUP has nothing to choose")
  assert _probe(runtime, AGENTRL_CGROUP="none")["limits"] == []  # rlimits only
  v2 = set(_probe(runtime, AGENTRL_CGROUP="v2")["limits"])
  assert v2 == set(cgroups.detect("v2").limits)  # v1 here (auto) gives all three


@pytest.mark.skipif(os.geteuid() != 0, reason="uid ranges are leased only by a root host")
def test_agentrl_uidrange_base_moves_the_sandbox_uids(sandbox_image, runtime):
  base = 0xFFFFFFFE - 2 * 65536  # room for two ranges: the sandbox must take one of them
  got = _probe(runtime, AGENTRL_UIDRANGE_BASE=str(base), MODE="container")
  inside = [u for u in got["uids"] if u != 0]  # the host-side helpers stay root
  assert inside and all(base <= u < base + 2 * 65536 for u in inside), got["uids"]
