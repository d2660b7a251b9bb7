"""The workspace manifest script (envs.grading.workspace): the same {path: digest} as a hashlib/json
reference on awkward names, on the host and in a real sandbox, and no stdlib module compiled
from source on each run (json, re, hashlib: the manifest runs without bytecode)."""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import sys

import pytest

from envs import sandbox as sandbox_lib
from envs.grading.workspace import MANIFEST_PY, NO_PYCACHE, manifest_cmd
from envs.sandbox import testing
from envs.task_env import workspace_manifest

backend, sandbox_image = testing.backend, testing.sandbox_image  # fixtures

# The reference: the same walk, hashed by hashlib and printed by json.dumps (as the script did
# before it avoided both).
_PRINT = MANIFEST_PY.strip().splitlines()[-1]
REFERENCE_PY = MANIFEST_PY.replace(_PRINT, "import json; print(json.dumps(out, sort_keys=True))")
REFERENCE_PY = REFERENCE_PY.replace("h = sha256()", "import hashlib; h = hashlib.sha256()")
assert "json.dumps" in REFERENCE_PY and "hashlib.sha256()" in REFERENCE_PY

# Names json escapes: quote, backslash, control characters, non-ASCII in and beyond the BMP,
# and a byte that is not UTF-8 (a lone surrogate in Python); links to a file, a folder, nowhere.
ODD = ["plain.txt", 'q"uote', "back\\slash", "new\nline", "tab\there", "caf\u00e9", "\u4e2d",
       "emoji\U0001f600", "del\x7f", "sub/deeper/x.py"]  # fmt: skip
MAKE_ODD = r"""
import os, sys
root = sys.argv[1]
for i, n in enumerate(NAMES):
  p = os.path.join(root, n)
  os.makedirs(os.path.dirname(p), exist_ok=True)
  with open(p, "wb") as f:
    f.write(("content %d " % i).encode() * (i + 1))
with open(os.path.join(root, os.fsdecode(b"raw\xffbyte")), "wb") as f:
  f.write(b"\x00\x01")
os.symlink("plain.txt", os.path.join(root, "to_file"))
os.symlink("sub", os.path.join(root, "to_dir"))
os.symlink("/nowhere/at/all", os.path.join(root, "dangling"))
""".replace("NAMES", repr(ODD))


def _run_host(script: str, *argv: str, importtime: bool = False) -> subprocess.CompletedProcess:
  flags = ["-I", "-B", "-X", NO_PYCACHE] + (["-X", "importtime"] if importtime else [])
  return subprocess.run(
    [sys.executable, *flags, "-c", script, *argv], capture_output=True, check=True
  )


def test_the_manifest_equals_the_hashlib_json_reference_on_awkward_names(tmp_path):
  ws = tmp_path / "ws"
  ws.mkdir()
  extra = tmp_path / "extra.bin"
  extra.write_bytes(b"x" * (3 << 20))  # more than one 1 MiB read
  subprocess.run([sys.executable, "-c", MAKE_ODD, str(ws)], check=True)
  got = json.loads(_run_host(MANIFEST_PY, str(ws), str(extra)).stdout)
  want = json.loads(_run_host(REFERENCE_PY, str(ws), str(extra)).stdout)
  assert got == want
  # and by hand, for a few entries
  assert got["plain.txt"] == hashlib.sha256(b"content 0 ").hexdigest()
  assert got[os.fsdecode(b"raw\xffbyte")] == hashlib.sha256(b"\x00\x01").hexdigest()
  assert got["to_dir"] == "link:sub" and got["dangling"] == "link:/nowhere/at/all"
  assert got[str(extra)] == hashlib.sha256(b"x" * (3 << 20)).hexdigest()
  assert "sub/deeper/x.py" in got and "emoji\U0001f600" in got and "new\nline" in got
  assert len(got) == len(ODD) + 5


def test_the_manifest_compiles_no_stdlib_module_from_source(tmp_path):
  (tmp_path / "a").write_text("a")

  def imports(r):
    return {ln.split("|")[-1].strip() for ln in r.stderr.decode().splitlines() if "|" in ln}

  r = _run_host(MANIFEST_PY, str(tmp_path), importtime=True)
  own = imports(r) - imports(_run_host("pass", importtime=True))  # beyond the start-up's
  assert "_sha256" in own or "_sha2" in own, own
  assert not own & {"json", "re", "hashlib", "enum", "collections", "functools"}, own
  assert json.loads(r.stdout) == {"a": hashlib.sha256(b"a").hexdigest()}


def test_the_manifest_in_a_sandbox_equals_the_reference(backend):
  with sandbox_lib.make(backend, sandbox_lib.SandboxSpec()) as sb:
    ws = sb.spec.workdir
    r = sb.exec(f"/usr/bin/python3 - {ws}", stdin=MAKE_ODD)
    assert r.exit_code == 0, r
    ref = sb.exec(f"/usr/bin/python3 -I -c {shlex.quote(REFERENCE_PY)} {ws} /etc/hostname")
    assert ref.exit_code == 0, ref
    got = workspace_manifest(sb, ws)
    assert got == json.loads(sb.exec(manifest_cmd(ws)).stdout)
    assert got == {k: v for k, v in json.loads(ref.stdout).items() if k != "/etc/hostname"}
    assert len(got) == len(ODD) + 4
    both = json.loads(sb.exec(manifest_cmd(ws, ["/etc/hostname"])).stdout)
    assert both == json.loads(ref.stdout)


@pytest.mark.parametrize("name", ["x\u2028y", "ctrl\x01", "\U0010ffff"])
def test_one_awkward_name_round_trips(tmp_path, name):
  p = tmp_path / name
  p.write_bytes(b"z")
  got = json.loads(_run_host(MANIFEST_PY, str(tmp_path)).stdout)
  assert got == {p.name: hashlib.sha256(b"z").hexdigest()}
