"""The tamper scan with package egress, in real sandboxes of both backends (container mode): a
real pip and apt inside install from package servers on the host's loopback (127.0.0.2, reached
only through the proxy); the host fetches the same packages itself and excuses only their files
(read from the writable layer: bwrap's upper folder, the container's overlay2 layers)."""

from __future__ import annotations

import functools
import hashlib
import http.server
import pathlib
import threading

import pip
import pytest
from package_files import apt_repo, wheel
from task_files import write

from envs import eval as ev
from envs.formats.loading import load_any
from envs.grading.verifier import system_flags
from envs.sandbox import egress_sources, system_guard
from envs.sandbox.egress_sources import PackageSources
from envs.sandbox.testing import backend, make, sandbox_image  # noqa: F401

HOST = "127.0.0.2"
SITE = "usr/local/lib/python3.11/dist-packages"
PIP = "PYTHONPATH=/opt/hostpip python3 -m pip install -q --no-cache-dir --break-system-packages"
APT = "-o Dir::Etc::SourceList=/tmp/t.list -o Dir::Etc::SourceParts=/nonexistent -q"


class _Handler(http.server.SimpleHTTPRequestHandler):
  def log_message(self, *args):
    self.server.paths.append(self.path)


@pytest.fixture
def served(tmp_path, monkeypatch):
  """(address, server) of a file server on HOST with a PEP 503 index and a flat apt repo."""
  root = tmp_path / "srv"
  whl = wheel(root / "files")
  sha = hashlib.sha256(whl.read_bytes()).hexdigest()
  (root / "simple/tinypkg").mkdir(parents=True)
  link = f'<a href="../../files/{whl.name}#sha256={sha}">{whl.name}</a>'
  (root / "simple/tinypkg/index.html").write_text(f"<html><body>{link}</body></html>\n")
  apt_repo(root / "apt")
  handler = functools.partial(_Handler, directory=str(root))
  srv = http.server.ThreadingHTTPServer((HOST, 0), handler)
  srv.paths = []
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  monkeypatch.setenv("AGENTRL_GENUINE_CACHE", str(tmp_path / "cache"))
  addr = f"{HOST}:{srv.server_port}"
  egress_sources.use(
    PackageSources(
      pip_indexes=(f"http://{addr}/simple",),
      pip_trusted_hosts=(HOST,),
      apt_uris=(f"http://{addr}/apt",),
    )
  )
  yield addr, srv
  srv.shutdown()
  egress_sources.use(None)


def _install(sb, addr: str) -> None:
  sb.upload(str(pathlib.Path(pip.__file__).parent), "/opt/hostpip/pip")
  r = sb.exec(f"{PIP} tinypkg")
  assert r.exit_code == 0, r.stderr
  cmd = f"echo 'deb [trusted=yes] http://{addr}/apt ./' > /tmp/t.list && apt-get {APT} update"
  r = sb.exec(f"{cmd} && apt-get {APT} -y install tinydeb && tinyalt")
  assert r.exit_code == 0 and "genuine tool" in r.stdout, r.stdout + r.stderr


def test_genuine_installs_pass_and_changes_are_flagged(backend, served):  # noqa: F811
  addr, srv = served
  with make(backend, network="packages", exec_timeout_s=300) as sb:
    baseline = sb.system_fingerprint()
    assert sb.system_layers() is not None  # read host-side (Docker: the overlay2 folders)
    _install(sb, addr)
    diff = system_guard.changed(baseline, sb.system_fingerprint())
    wanted = {f"{SITE}/tinypkg/__init__.py", "usr/lib/tinydeb/tool", "usr/bin/tinyalt"}
    assert wanted <= set(diff), diff  # without the exemption: tamper
    assert system_flags(sb, baseline) == ([], [])
    assert srv.paths.count("/files/tinypkg-0.1-py3-none-any.whl") == 2  # sandbox, host
    assert srv.paths.count("/apt/tinydeb_1.0_all.deb") == 1  # the host's own fetch
    snap = sb.snapshot()
    sb.exec(f"echo '# changed' >> /{SITE}/tinypkg/__init__.py")
    assert system_flags(sb, baseline) == (
      [f"tamper:system_modified:{SITE}/tinypkg/__init__.py"],
      [],
    )
    sb.restore(snap)
    forged = f"/{SITE}/evilpkg-1.0.dist-info"
    sb.exec(
      f"mkdir -p {forged} /{SITE}/evilpkg && echo 'import os' > /{SITE}/evilpkg/__init__.py && "
      f"printf 'Name: evilpkg\\nVersion: 1.0\\n' > {forged}/METADATA && "
      f"printf 'Tag: py3-none-any\\n' > {forged}/WHEEL && echo x > {forged}/RECORD"
    )
    flags, notes = system_flags(sb, baseline)
    assert flags == [f"tamper:system_modified:{SITE}/evilpkg-1.0.dist-info/METADATA,"
                     f"{SITE}/evilpkg-1.0.dist-info/RECORD,{SITE}/evilpkg-1.0.dist-info/WHEEL(+1)"]  # fmt: skip
    assert notes and notes[0].startswith("evilpkg 1.0: no wheel"), notes


def test_offline_sandbox_gets_no_exemption(backend, tmp_path):  # noqa: F811
  """The genuine wheel's files written by hand without package egress: flagged as before."""
  whl = wheel(tmp_path)
  with make(backend, exec_timeout_s=120) as sb:
    baseline = sb.system_fingerprint()
    sb.upload(str(whl), "/tmp/t.whl")
    r = sb.exec(f"cd /{SITE} && python3 -m zipfile -e /tmp/t.whl .")
    assert r.exit_code == 0, r.stderr
    flags, notes = system_flags(sb, baseline)
    assert flags and f"{SITE}/tinypkg" in flags[0] and notes == []


def test_eval_records_which_paths_were_flagged(backend, served, tmp_path):  # noqa: F811
  """Through launch.eval's runner: a solution's genuine installs pass; one that then edits an
  installed file fails as `tamper`, and the record says which path."""
  addr, _ = served
  apt = f"echo 'deb [trusted=yes] http://{addr}/apt ./' > /tmp/t.list && apt-get {APT} update"
  solve = f"python3 -m pip install -q --break-system-packages tinypkg\n{apt}\n"
  solve += f"apt-get {APT} -y install tinydeb\ntinyalt > /app/out.txt\n"
  files = {
    "task.toml": 'version = "1.0"\n[metadata]\ndifficulty = "easy"\n',
    "instruction.md": "Install tinypkg and tinydeb; write tinyalt's output to /app/out.txt.\n",
    "environment/Dockerfile": "FROM python:3.11-slim\nWORKDIR /app\n",
    "tests/test_outputs.py": "def test_out():\n  assert 'genuine' in open('/app/out.txt').read()\n",
  }
  edit = f"echo '# changed' >> /{SITE}/tinypkg/__init__.py\n"
  tasks = []
  for name, script in (("clean", solve), ("edited", solve + edit)):
    files["solution/solve.sh"] = f"#!/bin/bash\nset -e\n{script}"
    tasks.append(load_any(write(tmp_path / "s" / name, files)))
  clean, edited = ev.evaluate(tasks, ev.make_agent("oracle"), ev.EvalConfig(backend=backend))
  assert clean["passed"] and clean["flags"] == [], clean["detail"]
  assert edited["failure_mode"] == "tamper", edited["detail"]
  assert edited["flags"] == [f"tamper:system_modified:{SITE}/tinypkg/__init__.py"]
