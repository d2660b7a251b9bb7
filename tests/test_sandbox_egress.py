"""Package-only egress (network="packages"): real sandboxes, a real pip and apt inside, and
real package servers on the host's loopback (127.0.0.2, which is not the sandbox's own
loopback name, so the proxy is the only way there). No traffic leaves loopback."""

from __future__ import annotations

import functools
import hashlib
import http.server
import pathlib
import shutil
import subprocess
import tempfile
import threading
import zipfile

import pip
import pytest
from task_files import write

from envs import eval as ev
from envs.formats.loading import load_any
from envs.sandbox import egress_sources
from envs.sandbox.egress_sources import PackageSources
from envs.sandbox.testing import backend, make, sandbox_image  # noqa: F401

HOST = "127.0.0.2"  # on the host's loopback; inside a sandbox it is its own (empty) loopback

# Raw proxy requests from inside the sandbox: the status line of each, or the error.
_PROBE = """
import socket, sys
def status(req, port=13128):
  try:
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    s.sendall(req.encode())
    head = s.recv(4096).split(b"\\r\\n")[0].decode()
    if " 200 " in head and req.startswith("CONNECT"):  # the tunnel: talk HTTP through it
      s.sendall(b"GET /hello.txt HTTP/1.0\\r\\n\\r\\n")
      head += " | " + s.recv(4096).split(b"\\r\\n")[0].decode()
    return head
  except OSError as e:
    return type(e).__name__
ok, no = sys.argv[1], sys.argv[2]
print("connect-ok:", status(f"CONNECT {ok} HTTP/1.1\\r\\nHost: {ok}\\r\\n\\r\\n"))
print("connect-no:", status(f"CONNECT {no} HTTP/1.1\\r\\n\\r\\n"))
print("get-no:", status(f"GET http://{no}/hello.txt HTTP/1.1\\r\\nHost: {no}\\r\\n\\r\\n"))
print("direct:", status("GET / HTTP/1.0\\r\\n\\r\\n", int(ok.split(":")[1])))
"""


class _Served(http.server.SimpleHTTPRequestHandler):
  def log_message(self, *args):  # quiet; the paths are kept instead
    self.server.paths.append(self.path)


def _serve(root: pathlib.Path):
  """A file server on HOST; its `paths` lists every request it got."""
  srv = http.server.ThreadingHTTPServer(
    (HOST, 0), functools.partial(_Served, directory=str(root))
  )  # fmt: skip
  srv.paths = []
  threading.Thread(target=srv.serve_forever, daemon=True).start()
  return srv


def _wheel(folder: pathlib.Path) -> pathlib.Path:
  """A one-module pure-Python wheel, tinypkg 0.1 (VALUE = 42)."""
  files = {
    "tinypkg/__init__.py": b"VALUE = 42\n",
    "tinypkg-0.1.dist-info/METADATA": b"Metadata-Version: 2.1\nName: tinypkg\nVersion: 0.1\n",
    "tinypkg-0.1.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
    b"Tag: py3-none-any\n",
  }
  record = ""
  for name, data in files.items():
    digest = hashlib.sha256(data).digest().hex()
    record += f"{name},sha256={digest},{len(data)}\n"
  files["tinypkg-0.1.dist-info/RECORD"] = (record + "tinypkg-0.1.dist-info/RECORD,,\n").encode()
  path = folder / "tinypkg-0.1-py3-none-any.whl"
  with zipfile.ZipFile(path, "w") as z:
    for name, data in files.items():
      z.writestr(name, data)
  return path


def _pep503(root: pathlib.Path) -> None:
  """root/simple/tinypkg/ (PEP 503) linking to root/files/<the wheel>."""
  (root / "files").mkdir(parents=True)
  whl = _wheel(root / "files")
  sha = hashlib.sha256(whl.read_bytes()).hexdigest()
  (root / "simple/tinypkg").mkdir(parents=True)
  link = f'<a href="../../files/{whl.name}#sha256={sha}">{whl.name}</a>'
  (root / "simple/tinypkg/index.html").write_text(f"<html><body>{link}</body></html>\n")
  (root / "hello.txt").write_text("hello\n")


def _apt_repo(root: pathlib.Path) -> None:
  """A flat apt repository root/apt/ with one package, tinydeb (a file and nothing else)."""
  pkg, repo = root / "tinydeb", root / "apt"
  (pkg / "DEBIAN").mkdir(parents=True)
  (pkg / "usr/share/tinydeb").mkdir(parents=True)
  (pkg / "usr/share/tinydeb/hello").write_text("from the apt-like server\n")
  control = "Package: tinydeb\nVersion: 1.0\nArchitecture: all\nMaintainer: t <t@localhost>\n"
  (pkg / "DEBIAN/control").write_text(control + "Description: test package\n")
  repo.mkdir()
  deb = repo / "tinydeb_1.0_all.deb"
  subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(pkg), str(deb)], check=True)
  data = deb.read_bytes()
  entry = f"Filename: ./{deb.name}\nSize: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
  (repo / "Packages").write_text(control + entry + "Description: test package\n\n")


@pytest.fixture
def servers():
  """(allowed server, refused server): the first serves a pip index and an apt repository."""
  root = pathlib.Path(tempfile.mkdtemp(prefix="agentrl-egress-"))
  try:
    _pep503(root / "ok")
    _apt_repo(root / "ok")
    (root / "no").mkdir()
    (root / "no/hello.txt").write_text("must never be read\n")
    ok, no = _serve(root / "ok"), _serve(root / "no")
    yield ok, no
    ok.shutdown()
    no.shutdown()
  finally:
    shutil.rmtree(root, ignore_errors=True)
    egress_sources.use(None)


def _upload_pip(sb) -> None:
  """The host's own pip into the sandbox (the task image has none)."""
  sb.upload(str(pathlib.Path(pip.__file__).parent), "/opt/hostpip/pip")


def test_pip_and_apt_reach_allowed_sources_only(backend, servers):  # noqa: F811
  ok, no = servers
  ok_addr, no_addr = f"{HOST}:{ok.server_port}", f"{HOST}:{no.server_port}"
  sources = PackageSources(
    pip_indexes=(f"http://{ok_addr}/simple",),
    pip_trusted_hosts=(HOST,),
    apt_uris=(f"http://{ok_addr}/apt",),
  )
  egress_sources.use(sources)
  with make(backend, network="packages", exec_timeout_s=300) as sb:
    _upload_pip(sb)
    pip_cmd = "PYTHONPATH=/opt/hostpip python3 -m pip install -q --no-cache-dir --target /w/site"
    r = sb.exec(
      f"{pip_cmd} tinypkg && PYTHONPATH=/w/site python3 -c 'import tinypkg as t; print(t.VALUE)'"
    )
    assert (r.exit_code, r.stdout.strip()) == (0, "42"), r.stderr
    opts = "-o Dir::Etc::SourceList=/tmp/t.list -o Dir::Etc::SourceParts=/nonexistent -q"
    cmd = f"echo 'deb [trusted=yes] http://{ok_addr}/apt ./' > /tmp/t.list && apt-get {opts} update"
    r = sb.exec(f"{cmd} && apt-get {opts} -y install tinydeb && cat /usr/share/tinydeb/hello")
    assert r.exit_code == 0 and "from the apt-like server" in r.stdout, r.stdout + r.stderr
    sb.write_file("/tmp/probe.py", _PROBE)
    sb.restore(sb.snapshot())  # a restored sandbox (bwrap: new namespaces) keeps its route
    r = sb.exec(f"python3 /tmp/probe.py {ok_addr} {no_addr}")
    lines = dict(ln.split(": ", 1) for ln in r.stdout.splitlines())
    assert "200" in lines["connect-ok"] and "| HTTP/1.0 200" in lines["connect-ok"], r
    assert " 403 " in lines["connect-no"] and " 403 " in lines["get-no"], r
    assert lines["direct"] == "ConnectionRefusedError", r  # the host's loopback is not there
    assert sb.egress.refused == [f"CONNECT {no_addr}", f"GET {no_addr}"]
    ifaces = sb.exec("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '").stdout.split()
    assert ifaces == ["lo"]  # no route anywhere but the proxy on its own loopback
  assert no.paths == []  # nothing reached the refused server
  assert "/files/tinypkg-0.1-py3-none-any.whl" in ok.paths
  assert "/apt/./tinydeb_1.0_all.deb" in ok.paths


def test_file_sources_are_bound_read_only(backend, servers):  # noqa: F811
  wheels = pathlib.Path(tempfile.mkdtemp(prefix="agentrl-wheels-"))
  try:
    wheels.chmod(0o755)  # readable by the sandbox's unprivileged host uid
    _wheel(wheels).chmod(0o644)
    egress_sources.use(PackageSources(pip_find_links=(f"file://{wheels}",)))
    with make(backend, network="packages", exec_timeout_s=300) as sb:
      _upload_pip(sb)
      pip_cmd = "PYTHONPATH=/opt/hostpip python3 -m pip install -q --no-cache-dir --target /w/s"
      r = sb.exec(
        f"{pip_cmd} tinypkg && PYTHONPATH=/w/s python3 -c 'import tinypkg as t; print(t.VALUE)'"
      )
      assert (r.exit_code, r.stdout.strip()) == (0, "42"), r.stderr
      r = sb.exec(f"touch {wheels}/x")
      assert r.exit_code != 0 and "Read-only file system" in r.stderr, r
    assert sorted(p.name for p in wheels.iterdir()) == ["tinypkg-0.1-py3-none-any.whl"]
  finally:
    shutil.rmtree(wheels)


def test_machine_sources_follow_pip_and_apt_config(tmp_path, monkeypatch):
  conf = tmp_path / "pip.conf"
  conf.write_text(
    "[global]\nindex-url = http://idx.invalid:8080/simple\nfind-links = /nonexistent\n"
    "[install]\nextra-index-url = file:///srv/pypi/simple https://more.invalid/simple\n"
  )
  monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
  monkeypatch.setenv("PIP_FIND_LINKS", f"{tmp_path}/wheels")  # the environment wins
  (tmp_path / "wheels").mkdir()
  code = egress_sources.apt_sources.host_codename()
  apt = tmp_path / "apt"
  (apt / "sources.list.d").mkdir(parents=True)
  (apt / "sources.list").write_text(f"deb http://apt-one.invalid/repo {code} main\n")
  (apt / "sources.list.d/x.sources").write_text(
    f"Types: deb\nURIs: https://sec.invalid:8443/d file:///srv/apt\nSuites: {code}\n"
    "Components: main\n\nTypes: deb\nURIs: http://other.invalid/d\nSuites: no-such-release\n"
  )
  src = egress_sources.from_machine(apt)
  assert src.pip_indexes == (
    "http://idx.invalid:8080/simple",
    "file:///srv/pypi/simple",
    "https://more.invalid/simple",
  )
  assert src.pip_find_links == (f"{tmp_path}/wheels",)
  assert src.apt_uris == (
    "http://apt-one.invalid/repo",
    "https://sec.invalid:8443/d",
    "file:///srv/apt",
  )
  assert src.endpoints() == {
    ("idx.invalid", 8080),
    ("more.invalid", 443),
    ("apt-one.invalid", 80),
    ("sec.invalid", 8443),
  }
  assert src.folders() == (f"{tmp_path}/wheels",)  # /srv/... do not exist here
  env = src.sandbox_env()
  assert env["PIP_INDEX_URL"] == "http://idx.invalid:8080/simple"
  assert env["PIP_EXTRA_INDEX_URL"] == "file:///srv/pypi/simple https://more.invalid/simple"
  assert env["https_proxy"] == "http://127.0.0.1:13128" and "127.0.0.1" in env["no_proxy"]


def test_spec_network_values_are_checked():
  from envs.sandbox import common  # noqa: PLC0415
  from envs.sandbox.base import SandboxSpec  # noqa: PLC0415

  with pytest.raises(ValueError, match="network"):
    common.check_spec(SandboxSpec(network="everything"))
  assert not common.host_network(SandboxSpec(network="packages"))


def test_eval_grants_package_egress_unless_turned_off(backend, servers, tmp_path):  # noqa: F811
  """A Harbor task (allow_internet by default) whose solution fetches from an allowed source:
  passes with package egress, fails with EvalConfig(package_egress=False)."""
  ok, _ = servers
  egress_sources.use(PackageSources(pip_indexes=(f"http://{HOST}:{ok.server_port}/simple",)))
  fetch = f"import urllib.request as u; print(u.urlopen('http://{HOST}:{ok.server_port}/hello.txt').read().decode(), end='')"
  files = {
    "task.toml": 'version = "1.0"\n[metadata]\ndifficulty = "easy"\n',
    "instruction.md": "Fetch hello.txt into /app/out.txt.\n",
    "environment/Dockerfile": "FROM python:3.12-slim\nWORKDIR /app\n",
    "solution/solve.sh": f'#!/bin/bash\npython3 -c "{fetch}" > /app/out.txt\n',
    "tests/test_outputs.py": "def test_out():\n  assert open('/app/out.txt').read() == 'hello\\n'\n",
  }
  task = load_any(write(tmp_path / "s" / "fetch", files))
  assert task.network == "packages"
  oracle = ev.make_agent("oracle")
  (on,) = ev.evaluate([task], oracle, ev.EvalConfig(backend=backend))
  (off,) = ev.evaluate([task], oracle, ev.EvalConfig(backend=backend, package_egress=False))
  assert on["passed"], on["detail"]
  assert not off["passed"]
