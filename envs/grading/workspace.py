"""The one workspace manifest: {path: sha256 | "link:<target>" | "error:<why>"} of a sandbox's files.

Built in the sandbox by one Python script (no per-file exec), and used by both the tamper
baseline (envs.task_env, envs.grading.verifier) and the path constraints (envs.grading.milestones), so the two
checks can never disagree about what changed. Workspace paths are relative to it; extra roots
(absolute paths named by `unchanged` constraints) keep their absolute paths.
"""

from __future__ import annotations

import shlex

# Only built-in and frozen modules: the interpreter runs without bytecode (below), so every
# stdlib module it imports from source is compiled on each run, and `json` alone (with `re`,
# `enum`) cost ~35 ms of the ~60 ms each manifest took in a sandbox (Python 3.11). The JSON is
# written by hand in json.dumps(ensure_ascii=True) form: the host reads it with json.loads.
MANIFEST_PY = r"""
import os, sys
try:
  from _sha2 import sha256
except ImportError:
  try:
    from _sha256 import sha256
  except ImportError:
    from hashlib import sha256
ws, extra = sys.argv[1], sys.argv[2:]
out = {}
def add(p, key):
  if os.path.islink(p):
    out[key] = "link:" + os.readlink(p); return
  try:
    h = sha256()
    with open(p, "rb") as f:
      for b in iter(lambda: f.read(1 << 20), b""): h.update(b)
    out[key] = h.hexdigest()
  except OSError as e:
    out[key] = "error:" + type(e).__name__
def walk(root, rel):
  if os.path.isfile(root) or os.path.islink(root):
    add(root, rel(root)); return
  for d, dirs, files in os.walk(root):
    for n in files + [x for x in dirs if os.path.islink(os.path.join(d, x))]:
      p = os.path.join(d, n); add(p, rel(p))
def q(s):
  if s.isascii() and s.isprintable() and '"' not in s and "\\" not in s:
    return '"' + s + '"'
  r = []
  for c in s:
    o = ord(c)
    if 32 <= o < 127 and c != '"' and c != "\\":
      r.append(c)
    elif o < 0x10000:
      r.append("\\u%04x" % o)
    else:
      o -= 0x10000
      r.append("\\u%04x\\u%04x" % (0xD800 | o >> 10, 0xDC00 | o & 0x3FF))
  return '"' + "".join(r) + '"'
walk(ws, lambda p: os.path.relpath(p, ws))
for r in extra:
  walk(r, lambda p: p)
print("{" + ", ".join(q(k) + ": " + q(out[k]) for k in sorted(out)) + "}")
"""


# Bytecode looked up (and never written) under /proc, where no sandbox process can create files.
NO_PYCACHE = "pycache_prefix=/proc/.agentrl-no-pycache"


def manifest_cmd(workdir: str, extra_roots: tuple[str, ...] | list[str] = ()) -> str:
  """The shell command that prints the manifest as one JSON line (system python, isolated)."""
  roots = " ".join(shlex.quote(r) for r in (workdir, *extra_roots))
  # No bytecode read or written: a planted __pycache__/*.pyc of the stdlib must not run here.
  return f"/usr/bin/python3 -I -B -X {NO_PYCACHE} -c {shlex.quote(MANIFEST_PY)} {roots}"
