"""Limits of both sandbox backends: pids, memory, disk, output, time, process lifetime.

`limited` adds two bubblewrap variants to the backends: `bwrap-v2` (only a cgroup-v2 tracking
tree: limits fall back to rlimits) and `bwrap-rlimit` (no cgroups at all), so every
mechanism the backend can fall back to is exercised on this machine.
"""

from __future__ import annotations

import pathlib
import random
import subprocess
import threading

import pytest

from envs import sandbox as sandbox_lib
from envs.sandbox import testing

backend, sandbox_image = testing.backend, testing.sandbox_image  # fixtures

VARIANTS = {
  "bwrap": ("bwrap", {}),
  "bwrap-v2": ("bwrap", {"cgroup_mode": "v2"}),
  "bwrap-rlimit": ("bwrap", {"cgroup_mode": "none"}),
  "docker": ("docker", {}),
}


@pytest.fixture(params=testing.backend_params(list(VARIANTS)))
def limited(request, sandbox_image):
  name, opts = VARIANTS[request.param]  # Docker: checked by conftest (the `docker` mark)
  return request.param, lambda **kw: sandbox_lib.make(name, sandbox_lib.SandboxSpec(**kw), **opts)


def _host_pids_matching(args: str) -> list[int]:
  """Host processes whose command line contains `args` (words joined by spaces)."""
  needle, out = args.replace(" ", "\0").encode(), []
  for d in pathlib.Path("/proc").iterdir():
    try:
      if d.name.isdigit() and needle in (d / "cmdline").read_bytes():
        out.append(int(d.name))
    except OSError:
      pass
  return out


def test_fork_bomb_is_contained(limited):
  variant, mk = limited
  with mk(pids=64, cpus=1.0) as sb:
    box = {}
    bomb = "b(){ b | b & }; b; sleep 600"
    t = threading.Thread(target=lambda: box.setdefault("r", sb.exec(bomb, timeout_s=6)))
    t.start()
    # The host stays responsive while the bomb runs: it can still start processes.
    for _ in range(3):
      assert subprocess.run(["/bin/true"], timeout=60).returncode == 0
    t.join()
    r = box["r"]
    assert r.timed_out and r.exit_code == 137, r
    stats = sb.pids_stats()
    if stats is not None:  # a pids cgroup enforced the limit: it refused forks
      assert stats[1] > 0, stats
    else:  # RLIMIT_NPROC did
      assert "Resource temporarily unavailable" in r.stderr, r.stderr[-500:]
    after = sb.exec("ps -e -o comm= | grep -c bash")  # pid 1 and this shell only
    assert after.exit_code == 0 and int(after.stdout) <= 2, after
    assert sb.exec("echo alive").stdout == "alive\n"


_HOG = "python3 -c 'a = []\nwhile True: a.append(bytearray(16 << 20))'"


def test_memory_bomb_is_killed_and_reported(backend):
  with testing.make(backend, memory_mb=128, disk_mb=32) as sb:
    r = sb.exec(_HOG, timeout_s=120)
    assert r.oom_killed and r.exit_code == 137 and not r.timed_out, r
    ok = sb.exec("echo alive")
    assert ok.stdout == "alive\n" and not ok.oom_killed


def test_memory_rlimit_fallback():
  spec = sandbox_lib.SandboxSpec(memory_mb=128)
  with sandbox_lib.make("bwrap", spec, cgroup_mode="none") as sb:
    r = sb.exec(_HOG, timeout_s=120)
    assert r.exit_code == 1 and "MemoryError" in r.stderr, r


@pytest.mark.parametrize("mode", testing.MODES)
def test_disk_fill_stops_at_quota(backend, mode):
  with testing.make(backend, disk_mb=16, memory_mb=256, mode=mode) as sb:
    if not getattr(sb, "disk_capped", True):  # a remote daemon on an uncapped driver
      pytest.skip("this daemon's writable layer cannot be capped from here")
    wheres = (sb.spec.workdir, "/tmp") + (("/etc",) if mode == "container" else ())
    for where in wheres:
      r = sb.exec(f"dd if=/dev/zero of={where}/big bs=1M count=64; stat -c %s {where}/big")
      assert r.exit_code == 0, r  # stat's status; dd failed:
      assert "No space left on device" in r.stderr, r
      assert int(r.stdout.split()[-1]) <= 16 << 20, r
      assert (
        sb.exec(f"rm {where}/big && echo ok > {where}/small && cat {where}/small").stdout == "ok\n"
      )


def test_output_is_truncated_at_the_cap(backend):
  with testing.make(backend, max_output_bytes=4096) as sb:
    r = sb.exec("yes", timeout_s=2)
    assert r.truncated and r.timed_out and len(r.stdout) == 4096, (len(r.stdout), r.timed_out)
    assert set(r.stdout) == {"y", "\n"}
    r = sb.exec("head -c 100000 /dev/zero | tr '\\0' a; echo done >&2")
    assert r.exit_code == 0 and r.truncated and not r.timed_out
    assert r.stdout == "a" * 4096 and r.stderr == "done\n"
    r = sb.exec("head -c 10000 /dev/zero | tr '\\0' e >&2")
    assert r.truncated and r.stderr == "e" * 4096 and r.stdout == ""
    r = sb.exec("echo small")
    assert not r.truncated and r.stdout == "small\n"


def test_timeout_kills_the_whole_tree(limited):
  variant, mk = limited
  with mk() as sb:
    r = sb.exec("sleep infinity", timeout_s=1)
    assert r.timed_out and r.exit_code == 137, r
    m = random.randrange(10**6, 10**7)
    cmd = (
      f"trap '' TERM; (trap '' TERM; sleep {m}1) & setsid sleep {m}2 & "
      f"sh -c 'trap \"\" TERM; sleep {m}3' & sleep {m}4"
    )
    r = sb.exec(cmd, timeout_s=1.5)
    assert r.timed_out and r.exit_code == 137, r
    left = sb.exec(f"ps -e -o args= | grep -c '[s]leep {m}' || true")
    assert left.stdout.strip() == "0", left
    assert not _host_pids_matching(f"sleep {m}")
    assert sb.exec("echo alive").stdout == "alive\n"


def test_background_processes_do_not_survive_close(backend):
  m = random.randrange(10**6, 10**7)
  sb = testing.make(backend)
  r = sb.exec(
    f"nohup sleep {m}1 >/dev/null 2>&1 & setsid sleep {m}2 >/dev/null 2>&1 & "
    f"(sleep {m}3 &) ; echo started",
    timeout_s=10,
  )
  assert r.stdout == "started\n" and not r.timed_out, r  # returns while they keep running
  assert len(sb.exec(f"ps -e -o args= | grep '^sleep {m}'").stdout.splitlines()) == 3
  assert len(_host_pids_matching(f"sleep {m}")) == 3
  sb.close()
  assert not _host_pids_matching(f"sleep {m}")
  sb.close()  # idempotent
  with pytest.raises(sandbox_lib.SandboxError):
    sb.exec("true")


def test_episode_time_limit(backend):
  with testing.make(backend, episode_timeout_s=3.0) as sb:
    r = sb.exec("sleep 30", timeout_s=60)
    assert r.timed_out, r
    r = sb.exec("echo late")
    assert r.timed_out and "episode time limit" in r.stderr
    assert sb.read_file("/etc/hostname")  # file operations still work for grading
