"""Container-like mode and the host-escape classes, on both backends (and both modes where the
class applies): a copy-on-write root as uid 0 that stays unprivileged outside; stray processes
killed by cgroup / pid namespace (never by name); file transfers the agent cannot reach, capped
and filtered host-side; host disk bounded; seccomp and no-new-privileges; exec timeouts that
catch `setsid env -i` children; /proc/self/mountinfo without host paths."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tarfile

import pytest

from envs import sandbox as sandbox_lib
from envs.sandbox import docker_layer, testing
from envs.sandbox import image as image_lib
from envs.sandbox.testing import make

backend, mode, sandbox_image = testing.backend, testing.mode, testing.sandbox_image  # fixtures


def _procs(sb) -> list[str]:
  """The sandbox's processes but this exec's own (pid, state, cmdline)."""
  r = sb.exec(
    "for p in /proc/[0-9]*; do [ ${p#/proc/} = $$ ] && continue; "
    "c=$(tr '\\0' ' ' < $p/cmdline 2>/dev/null) || continue; echo \"${p#/proc/} $c\"; done"
  )
  return [ln for ln in r.stdout.splitlines() if ln.split()[1:2] != ["tr"]]


def test_container_root_is_copy_on_write(backend, sandbox_image):
  with make(backend) as sb:
    r = sb.exec("id -u; echo hi > /etc/agentrl-x && rm /etc/debian_version && mkdir -p /data /app && "
                "cp /bin/true /usr/local/bin/t && chmod 4755 /usr/local/bin/t && t && "
                "stat -c %u /etc/passwd; pwd")  # fmt: skip
    assert r.exit_code == 0 and r.stdout == "0\n0\n/workspace\n", r
    assert sb.read_file("/etc/agentrl-x") == b"hi\n"
  with make(backend) as fresh:  # the upper layer went with its sandbox
    assert fresh.exec("test -e /etc/agentrl-x || test ! -e /etc/debian_version").exit_code != 0
  tree = sandbox_image.rootfs
  assert (tree / "etc/debian_version").exists() and not (tree / "etc/agentrl-x").exists()


def test_container_identity_is_unprivileged_outside(backend):
  with make(backend) as sb:
    r = sb.exec("grep -E '^(CapEff|CapBnd|NoNewPrivs)' /proc/self/status")
    caps = dict(ln.split(":\t") for ln in r.stdout.splitlines())
    eff = int(caps["CapEff"], 16)
    for bit, name in ((21, "SYS_ADMIN"), (19, "SYS_PTRACE"), (16, "SYS_MODULE"), (27, "MKNOD")):
      assert not eff >> bit & 1, f"uid 0 holds CAP_{name}"
    assert caps["NoNewPrivs"] == "1" and eff >> 0 & 1  # CHOWN kept, as in Docker
    for cmd in (
      "unshare -U true",
      "unshare -m true",
      "mount -t tmpfs x /mnt",
      "mknod /tmp/d c 1 3",
    ):
      assert sb.exec(cmd).exit_code != 0, cmd
    assert sb.exec("kill -9 1; echo alive").stdout == "alive\n" and sb.alive
    if backend == "bwrap":  # uid 0 inside is an unprivileged uid of a leased range outside
      assert sb.exec("sleep 30 >/dev/null 2>&1 & echo started").stdout == "started\n"
      pids = [p for p in testing.descendants(os.getpid()) if _uid_of(p) is not None]
      uids = {_uid_of(p) for p in pids} - {0, os.getuid()}
      assert uids and min(uids) >= 1 << 20, uids
    elif docker_layer.userns_remapped(sb.api):  # launch/setup.sh starts dockerd so
      assert 0 not in docker_layer.host_uids(sb.api, sb.id)
    else:  # a daemon without userns-remap: uid 0 inside is the host's (README, Known gaps)
      assert not testing.under_ci(), "CI's dockerd must run userns-remap"


def _uid_of(pid: int) -> int | None:
  try:
    for ln in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
      if ln.startswith("Uid:"):
        return int(ln.split()[1])
  except OSError:
    return None
  return None


def test_stray_processes_die_whatever_their_name(backend, mode):
  """A daemon that renames itself with ')' and a newline (faking /proc/PID/stat fields) and
  leaves its session and environment still dies."""
  with make(backend, mode=mode) as sb:
    r = sb.exec(
      'setsid env -i /bin/sh -c \'printf "x) S 1 1 1\\n" > /proc/self/comm; '
      'exec -a "evil) S 1 1 1" sleep 4242\' >/dev/null 2>&1 & '
      "nohup sleep 4343 >/dev/null 2>&1 & echo started"
    )
    assert r.stdout == "started\n", r
    assert any("4242" in p for p in _procs(sb)) or any("4343" in p for p in _procs(sb))
    sb.kill_strays()
    left = [p for p in _procs(sb) if "4242" in p or "4343" in p]
    assert not left, left
    assert sb.exec("echo ok").stdout == "ok\n" and sb.alive  # the sandbox itself lives on


def test_stray_processes_die_without_cgroups(mode):
  """Without a tracking cgroup, the pid namespace is the boundary (kill(-1) from inside)."""
  spec = sandbox_lib.SandboxSpec(mode=mode)
  with sandbox_lib.make("bwrap", spec, cgroup_mode="none") as sb:
    sb.write_file(f"{sb.home}/.bash_profile", "kill() { :; }\n")  # a rigged login shell
    sb.exec("setsid env -i sleep 4646 >/dev/null 2>&1 & echo")
    assert any("4646" in p for p in _procs(sb))
    sb.kill_strays()
    assert not [p for p in _procs(sb) if "sleep 4646" in p]


def test_exec_timeout_kills_setsid_env_i_children(backend, mode):
  with make(backend, mode=mode) as sb:
    r = sb.exec("setsid env -i sleep 4444 & setsid -f env -i sleep 4445; wait", timeout_s=2)
    assert r.timed_out
    # "sleep 444", not "444": the listing's own exec wrapper carries its time limit, which
    # can read 1797.444 (seen in CI)
    left = [p for p in _procs(sb) if "sleep 444" in p]
    assert not left, left


_KILLER = (  # the agent kills every process it can see but itself, pid 1 and its helpers
  "while :; do for p in /proc/[0-9]*; do p=${p#/proc/}; [ $p = 1 ] || [ $p = $$ ] || "
  "kill -STOP $p 2>/dev/null; done; done"
)


def test_transfers_are_out_of_the_agents_reach(backend, mode, tmp_path):
  """File operations work while an agent process stops everything it can see."""
  with make(backend, mode=mode) as sb:
    sb.write_file("keep.txt", "before")
    sb.exec(f"setsid nohup sh -c '{_KILLER}' >/dev/null 2>&1 &")
    sb.write_file("a.txt", "payload")
    assert sb.read_file("a.txt") == b"payload"
    src = tmp_path / "up"
    (src / "d").mkdir(parents=True)
    (src / "d" / "f").write_text("uploaded")
    sb.upload(str(src), "up")
    sb.download("up", str(tmp_path / "down"))
    assert (tmp_path / "down" / "d" / "f").read_text() == "uploaded"
    snap = sb.snapshot()
    sb.restore(snap)


def test_restore_accepts_only_issued_snapshots(backend, mode, tmp_path):
  evil = tmp_path / "evil.tar"
  with tarfile.open(evil, "w") as tf:
    ti = tarfile.TarInfo("workspace/x")
    ti.type, ti.linkname = tarfile.SYMTYPE, "/"
    tf.addfile(ti)
  with make(backend, mode=mode) as sb:
    with pytest.raises(KeyError):
      sb.restore(str(evil))
    with pytest.raises(KeyError):
      sb.restore("/etc/passwd")


def test_downloads_materialise_no_dangerous_links(backend, mode, tmp_path):
  secret = tmp_path / "host-secret"
  secret.write_text("untouched")
  with make(backend, mode=mode) as sb:
    sb.exec(
      f"mkdir -p ws/sub && ln -s {secret} ws/abs && ln -s ../../.. ws/sub/esc && "
      "echo data > ws/f && ln ws/f ws/hard && ln -s / top"
    )
    out = tmp_path / "out"
    sb.download("ws", str(out))
    assert not os.path.lexists(out / "abs") and not os.path.lexists(out / "sub" / "esc")
    assert (out / "hard").read_text() == "data\n" and not (out / "hard").is_symlink()
    with pytest.raises(FileNotFoundError):
      sb.download("top", str(tmp_path / "top"))  # a top-level link is never moved into place
    assert not os.path.lexists(tmp_path / "top")
    sb.upload(str(out), "ws")
  assert secret.read_text() == "untouched"


def test_host_disk_is_bounded(backend, mode, tmp_path):
  with make(backend, mode=mode, disk_mb=16) as sb:
    cap = sb.transfer_cap()
    assert sb.exec("truncate -s 6G /tmp/sparse && echo ok").stdout == "ok\n"
    with pytest.raises(sandbox_lib.TransferLimitError):
      sb.download("/tmp/sparse", str(tmp_path / "sparse"))
    with pytest.raises(sandbox_lib.TransferLimitError):
      sb.read_file("/tmp/sparse")
    assert not (tmp_path / "sparse").exists()
    try:
      snap = sb.snapshot()
    except sandbox_lib.TransferLimitError:
      pass
    else:  # kept sparse: the host file is small
      assert os.path.getsize(snap) <= cap
    # Real bytes stop at the sandbox's own cap (bwrap: a tmpfs upper layer; Docker: a tmpfs
    # over the container's layer folder, or the storage driver's quota), never on the host.
    where = "/etc" if mode == "container" else "/tmp"
    r = sb.exec(f"rm -f /tmp/sparse; head -c 64M /dev/zero > {where}/fill", timeout_s=60)
    assert r.exit_code != 0 and "No space left" in r.stderr, r
    r = sb.exec(f"fallocate -l 64M {where}/fall || dd if=/dev/zero of={where}/dd bs=1M count=64")
    assert r.exit_code != 0 and "No space left" in r.stderr, r
    if backend == "docker" and mode == "container":
      upper = docker_layer.upper_dir(sb.api, sb.id)  # host side: the layer's own size
      used = sum(f.stat().st_blocks * 512 for f in upper.rglob("*") if not f.is_symlink())
      assert sb.disk_capped and used <= (16 << 20) + (1 << 20), used


def test_strays_die_while_they_fork(backend, mode):
  """A storm of short-lived forks (each leaves a sleeper behind) cannot outrun the cleanup:
  bwrap freezes the cgroup, Docker pauses the container (its freezer) while it kills."""
  with make(backend, mode=mode, pids=128) as sb:
    # 90 sleepers, then short-lived forks for ever: the storm keeps forking through the
    # cleanup, and leaves the probe below room to fork (a storm that filled the pids limit
    # once left none: "Cannot fork").
    storm = (
      "setsid sh -c 'i=0; while :; do if [ $i -lt 90 ]; then (sleep 4747 &); i=$((i+1)); "
      "else (:); fi; done' >/dev/null 2>&1 & echo started"
    )
    assert sb.exec(storm).stdout == "started\n"
    assert sb.exec("until pgrep -c -f 'sleep 4747' >/dev/null; do :; done; echo up").stdout
    sb.kill_strays()
    assert not [p for p in _procs(sb) if "4747" in p]
    assert sb.exec("echo ok").stdout == "ok\n" and sb.alive


def test_a_full_process_table_is_empty_when_the_cleanup_returns(backend, mode):
  """Killed processes hold their pids slots until pid 1 reaps them: kill_strays returns only
  when they are gone, so the next exec (the grader's, a reset's file write) can start."""
  with make(backend, mode=mode, pids=64) as sb:
    fill = (
      "python3 -c 'import os, time\nwhile True:\n  try:\n    pid = os.fork()\n"
      "  except OSError:\n    break\n  if pid == 0:\n    time.sleep(1000)\n    os._exit(0)\n'"
    )
    sb.exec(fill, timeout_s=60)
    sb.kill_strays()
    stats = sb.pids_stats()
    if stats is not None:
      assert stats[0] <= 4 and stats[1] > 0, stats  # pid 1, its sleep, this probe's sh and cat
    sb.write_file("/tmp/after", b"ok", 0o644)
    assert sb.exec("cat /tmp/after").stdout == "ok"


def test_restore_leaves_no_zombie_holding_a_pids_slot():
  """A container-mode restore restarts pid 1: the old one is reaped by bwrap, not left to the
  host's init (a zombie that kept a pids slot, so the next kill_strays waited for the host's
  init to reap it: seconds on some hosts, and the gate restores between every run)."""
  with make("bwrap", mode="container") as sb:
    old = sb.host_init_pid()
    sb.restore(sb.snapshot())
    assert sb.host_init_pid() != old
    assert not pathlib.Path(f"/proc/{old}").exists()  # reaped, not a zombie
    stats = sb.pids_stats()
    assert stats is None or stats[0] <= 3, stats  # pid 1, its sleep, this probe
    sb.kill_strays()
    assert sb.exec("echo ok").stdout == "ok\n"


@pytest.mark.docker
def test_docker_pids_stats_errors_are_sandbox_errors(sandbox_image):
  with make("docker") as sb:
    assert sb.pids_stats()[0] >= 1
    sb.exec("printf '#!/bin/sh\\necho not-a-number\\n' > /bin/cat")  # bad stats
    with pytest.raises(sandbox_lib.SandboxError, match="unreadable pids cgroup"):
      sb.pids_stats()
    sb.exec("rm -f /bin/cat")  # missing stats
    with pytest.raises(sandbox_lib.SandboxError, match="unreadable pids cgroup"):
      sb.pids_stats()


def test_docker_cases_fail_under_ci_without_a_daemon(tmp_path):
  """The one rule for Docker cases (testing.require_docker): skip without a daemon, fail
  instead under CI=true; a test that only carries the `docker` mark gets it from
  tests/conftest.py (an error at set-up under CI=true)."""
  (tmp_path / "test_needs_docker.py").write_text(
    "from envs.sandbox import testing\n\ndef test_it():\n  testing.require_docker()\n"
  )
  marked = tmp_path / "marked"
  marked.mkdir()
  (marked / "conftest.py").write_text("from tests.conftest import pytest_runtest_setup  # noqa\n")
  (marked / "test_marked.py").write_text(
    "import pytest\n\n@pytest.mark.docker\ndef test_it():\n  pass\n"
  )
  root = pathlib.Path(__file__).resolve().parents[1]
  env = {**os.environ, "PYTHONPATH": str(root), "DOCKER_HOST": f"unix://{tmp_path}/no.sock"}
  cases = (
    (tmp_path, "test_needs_docker.py", (("true", "1 failed"), ("", "1 skipped"))),
    (marked, "test_marked.py", (("true", "1 error"), ("", "1 skipped"))),
  )
  for cwd, name, outcomes in cases:
    for ci, outcome in outcomes:
      p = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", name],
        cwd=cwd,
        env={**env, "CI": ci},
        capture_output=True,
        text=True,
        timeout=300,
      )
      assert outcome in p.stdout and "no reachable Docker daemon" in p.stdout, p.stdout[-2000:]
      assert ("CI=true but" in p.stdout) == (ci == "true"), p.stdout[-2000:]


_SYSCALLS = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
def err(nr, *a):
  return 0 if libc.syscall(nr, *a) >= 0 else ctypes.get_errno()
child = os.fork()
if child == 0:
  os.pause()
print("ptrace", err(101, 16, child, 0, 0))          # PTRACE_ATTACH
pidfd = os.pidfd_open(child)
print("pidfd_getfd", err(438, pidfd, 0, 0))
print("add_key", err(248, b"user", b"k", b"v", 1, -3))
print("keyctl", err(250, 0, -3, 0, 0))
os.kill(child, 9)
"""


def test_seccomp_denies_tracing_and_keys(mode):
  with make("bwrap", mode=mode) as sb:
    sb.write_file("/tmp/sc.py", _SYSCALLS)
    r = sb.exec("python3 /tmp/sc.py; grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status")
    got = dict(ln.split(None, 1) for ln in r.stdout.splitlines())
    for name in ("ptrace", "pidfd_getfd", "add_key", "keyctl"):
      assert got[name].strip() == "1", (name, r)  # EPERM
    assert got["Seccomp:"].strip() == "2" and got["NoNewPrivs:"].strip() == "1"
    r = sb.exec("cat /proc/1/status | grep -E '^(Seccomp|NoNewPrivs):'")  # pid 1 too
    assert "Seccomp:\t2" in r.stdout and "NoNewPrivs:\t1" in r.stdout, r


def test_mountinfo_shows_no_host_path(mode, sandbox_image):
  with make("bwrap", mode=mode) as sb:
    info = sb.exec("cat /proc/self/mountinfo").stdout
    for needle in (str(image_lib.cache_root()), str(sandbox_image.rootfs), "agentrl"):
      assert needle not in info, (needle, info)
    assert " / / " in info


def test_package_layers_install_at_build_time(backend):
  spec = sandbox_lib.SandboxSpec(apt_packages=("dos2unix",), pip_packages=("six==1.16.0",))
  with sandbox_lib.make(backend, spec) as sb:
    r = sb.exec(
      "printf 'a\\r\\n' | dos2unix | od -c | head -1; python3 -c 'import six; print(six.__version__)'"
    )
    assert r.exit_code == 0 and "a  \\n" in r.stdout and "1.16.0" in r.stdout, r
    assert sb.exec("ls /var/lib/apt/lists | grep -c Packages").stdout.strip() == "0"
  with pytest.raises(sandbox_lib.SandboxError, match="agentrl-no-such-pkg"):
    sandbox_lib.make(backend, sandbox_lib.SandboxSpec(apt_packages=("agentrl-no-such-pkg",)))
  with pytest.raises(sandbox_lib.SandboxError, match="agentrl-no-such-pip-pkg"):
    sandbox_lib.make(backend, sandbox_lib.SandboxSpec(pip_packages=("agentrl-no-such-pip-pkg",)))


@pytest.mark.parametrize(
  ("field", "value"),
  [("mode", "rootless"), ("apt_packages", ("Bad Name",)), ("pip_packages", ("--index-url=x",))],
)
def test_new_spec_fields_are_checked(field, value):
  spec = sandbox_lib.SandboxSpec(**{field: value})
  with pytest.raises(ValueError, match=f"SandboxSpec.{field}"):
    sandbox_lib.make("bwrap", spec)
