"""The one workspace manifest: {path: sha256 | "link:<target>" | "error:<why>"} of a sandbox's files.

Built in the sandbox by one Python script (no per-file exec), and used by both the tamper
baseline (envs.task_env, envs.verifier) and the path constraints (envs.milestones), so the two
checks can never disagree about what changed. Workspace paths are relative to it; extra roots
(absolute paths named by `unchanged` constraints) keep their absolute paths.
"""

from __future__ import annotations

import shlex

MANIFEST_PY = r"""
import hashlib, json, os, sys
ws, extra = sys.argv[1], sys.argv[2:]
out = {}
def add(p, key):
  if os.path.islink(p):
    out[key] = "link:" + os.readlink(p); return
  try:
    h = hashlib.sha256()
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
walk(ws, lambda p: os.path.relpath(p, ws))
for r in extra:
  walk(r, lambda p: p)
print(json.dumps(out, sort_keys=True))
"""


# Bytecode looked up (and never written) under /proc, where no sandbox process can create files.
NO_PYCACHE = "pycache_prefix=/proc/.agentrl-no-pycache"


def manifest_cmd(workdir: str, extra_roots: tuple[str, ...] | list[str] = ()) -> str:
  """The shell command that prints the manifest as one JSON line (system python, isolated)."""
  roots = " ".join(shlex.quote(r) for r in (workdir, *extra_roots))
  # No bytecode read or written: a planted __pycache__/*.pyc of the stdlib must not run here.
  return f"/usr/bin/python3 -I -B -X {NO_PYCACHE} -c {shlex.quote(MANIFEST_PY)} {roots}"
