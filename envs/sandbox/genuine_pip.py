"""Genuine wheel files: what pip would have written, fetched by the host from the sandbox's
own package sources.

A `*.dist-info` folder the sandbox wrote names a project and version (and, in WHEEL, the
wheel's tags); all of that is the agent's to forge, so it only chooses what to fetch. The
host's own pip downloads that exact wheel (`--no-deps --only-binary=:all:`, the tags and the
sandbox's Python version as the target) from the sources the sandbox was given, and every
member of the wheel is hashed: its files (`.data/purelib` and `platlib` land beside the
dist-info folder) are the genuine contents of the paths below that site-packages folder.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile

from envs.sandbox import genuine_cache
from envs.sandbox.egress_sources import PackageSources
from envs.sandbox.rootview import RootView

# Written by pip itself at install time, never part of a wheel; metadata no grader reads.
PIP_WRITTEN = ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json")
_SITE = re.compile(r"(?:^|/)python(\d)\.(\d+)/(?:site|dist)-packages$")
_SOURCE_VARS = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_FIND_LINKS", "PIP_TRUSTED_HOST")
_FETCH_TIMEOUT_S = 900.0
# PEP 508 names and PEP 440-like versions: anything else (a leading "-" would be read by pip as
# an option, "--index-url=..." a source of the agent's choosing) is not fetched at all.
_PROJECT = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
_VERSION = re.compile(r"[0-9A-Za-z](?:[0-9A-Za-z.+!_-]*[0-9A-Za-z])?")


def dist_infos(paths) -> list[str]:
  """The `*.dist-info` folders (relative to /) that hold any of `paths` (sorted)."""
  out = set()
  for p in paths:
    parts = p.split("/")
    for i, part in enumerate(parts[:-1]):
      if part.endswith(".dist-info") and i > 0:
        out.add("/".join(parts[: i + 1]))
        break
  return sorted(out)


def _field(text: str, key: str) -> list[str]:
  pre = key.lower() + ":"
  return [ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.lower().startswith(pre)]


def claim(view: RootView, info: str) -> dict | None:
  """What dist-info folder `info` says it is (untrusted): name, version, tags, the target
  Python (from its site-packages path); None when it says too little to fetch anything."""
  meta = (view.read(f"{info}/METADATA", 1 << 20) or b"").decode("utf-8", "replace")
  wheel = (view.read(f"{info}/WHEEL", 1 << 16) or b"").decode("utf-8", "replace")
  name, version = _field(meta, "Name")[:1], _field(meta, "Version")[:1]
  site = info.rsplit("/", 1)[0]
  m = _SITE.search(site)
  tags = [t for t in _field(wheel, "Tag") if re.fullmatch(r"[\w.]+-[\w.]+-[\w.]+", t)]
  if not (name and version and m and tags):
    return None
  if not (_PROJECT.fullmatch(name[0]) and _VERSION.fullmatch(version[0])):
    return None
  return dict(name=name[0], version=version[0], tags=sorted(tags), python=m.group(1) + m.group(2))


def target_args(tags: list[str], python: str) -> list[str]:
  """pip download's target options: the sandbox's Python and the installed wheel's tags."""
  args = ["--python-version", python]
  interp = {t.split("-")[0] for t in tags}
  abis = sorted({t.split("-")[1] for t in tags} - {"none"})
  plats = sorted({t.split("-")[2] for t in tags} - {"any"})
  if plats:
    impl = sorted({re.sub(r"\d+$", "", i) for i in interp})[0]
    args += ["--implementation", impl]
    args += [a for abi in abis for a in ("--abi", abi)]
    args += [a for p in plats for a in ("--platform", p)]
  return args


def pip_env(sources: PackageSources) -> dict[str, str]:
  """The host pip's environment for a fetch: its own, with the package sources the sandbox
  was given in place of any other (and no constraint file: the exact version is asked)."""
  env = {k: v for k, v in os.environ.items() if k not in _SOURCE_VARS + ("PIP_NO_INDEX",)}
  env.update({k: "" for k in _SOURCE_VARS[1:]})
  env.update({k: v for k, v in sources.sandbox_env().items() if k.startswith("PIP_")})
  env.update(PIP_CONSTRAINT=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
  return env


def members(wheel: str) -> dict[str, str]:
  """{path below site-packages: "f:<sha256>"} of a wheel's files that land there."""
  out = {}
  with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
      name = info.filename
      if info.is_dir() or name.startswith("/") or ".." in name.split("/"):
        continue
      top, _, rest = name.partition("/")
      if top.endswith(".data"):  # only the library schemes land beside the dist-info
        scheme, _, rest = rest.partition("/")
        if scheme not in ("purelib", "platlib") or not rest:
          continue
        name = rest
      h = hashlib.sha256()
      with z.open(info) as f:
        while chunk := f.read(1 << 20):
          h.update(chunk)
      out[name] = f"f:{h.hexdigest()}"
  return out


def _cache_name(c: dict) -> str:
  key = json.dumps([c["name"], c["version"], c["tags"], c["python"]]).encode()
  safe = re.sub(r"[^\w.-]", "_", f"{c['name']}-{c['version']}")[:80]
  return f"{safe}-{hashlib.sha256(key).hexdigest()[:16]}.json"


def fetch(c: dict, sources: PackageSources, cache: str) -> tuple[dict[str, str] | None, str]:
  """(members of the genuine wheel of claim `c`, "") or (None, why not); kept in `cache`."""
  path = os.path.join(cache, "pip", _cache_name(c))
  if (hit := genuine_cache.load(path)) is not None:
    return hit, ""
  with tempfile.TemporaryDirectory(prefix="agentrl-wheel-") as dest:
    argv = [sys.executable, "-m", "pip", "download", "-q", f"{c['name']}=={c['version']}"]
    argv += ["--no-deps", "--only-binary=:all:", "--dest", dest]
    argv += target_args(c["tags"], c["python"])
    try:
      p = subprocess.run(
        argv, capture_output=True, text=True, env=pip_env(sources), timeout=_FETCH_TIMEOUT_S
      )
    except subprocess.TimeoutExpired:
      return None, f"{c['name']} {c['version']}: no wheel (pip download timed out)"
    wheels = [n for n in os.listdir(dest) if n.endswith(".whl")]
    if p.returncode != 0 or len(wheels) != 1:
      err = (p.stderr.strip().splitlines() or ["no wheel"])[-1][:160]
      return None, f"{c['name']} {c['version']}: no wheel ({err})"
    found = members(os.path.join(dest, wheels[0]))
  genuine_cache.keep(path, found)
  return found, ""


def genuine_files(
  changed: list[str], view: RootView, sources: PackageSources, cache: str
) -> tuple[dict[str, set[str]], set[str], list[str]]:
  """({path: genuine contents}, pip-written metadata paths, notes) for the dist-info folders
  among `changed` paths: a folder whose wheel the host could fetch contributes its members
  (below its site-packages folder) and its pip-written files; one it could not, a note."""
  genuine: dict[str, set[str]] = {}
  written, notes = set(), []
  for info in dist_infos(changed):
    c = claim(view, info)
    found, why = fetch(c, sources, cache) if c else (None, f"{info}: no name, version or tag")
    if found is None:
      notes.append(why)
      continue
    if f"{info.rsplit('/', 1)[1]}/METADATA" not in found:
      notes.append(f"{c['name']} {c['version']}: the wheel has no {info.rsplit('/', 1)[1]}")
      continue
    site = info.rsplit("/", 1)[0]
    for rel, content in found.items():
      genuine.setdefault(f"{site}/{rel}", set()).add(content)
    written |= {f"{info}/{n}" for n in PIP_WRITTEN}
  return genuine, written, notes
