"""Genuine .deb files: what dpkg would have written, fetched by the host from the sandbox's
own apt sources.

The sandbox's /var/lib/dpkg/status is the agent's to forge: it only chooses what to fetch (a
package whose name, version or architecture differs from the image's, installed or left
unpacked by an interrupted dpkg or a failed maintainer script). For each, the host
reads the Packages index of the sources the sandbox was given (the machine's stanzas for
those URIs, else the flat layout `URI/Packages`), downloads the .deb the index names, checks
its SHA256 against the index and reads its data members (`dpkg-deb --fsys-tarfile`): file
contents and link targets, at the path each lands on in the sandbox's root (through its own
folder links, /bin -> usr/bin).
"""

from __future__ import annotations

import gzip
import hashlib
import lzma
import os
import re
import subprocess
import tarfile
import tempfile
import threading
import time
import urllib.parse
import urllib.request

from envs.sandbox import apt_sources, genuine_cache
from envs.sandbox.egress_sources import PackageSources
from envs.sandbox.rootview import RootView

STATUS = "var/lib/dpkg/status"
UPDATES = "var/lib/dpkg/updates"
_NAME = re.compile(r"[a-z0-9][a-z0-9+.-]*")
_INDEX_TTL_S = 3600.0
_TIMEOUT_S = 300.0
_INDEXES: dict[str, tuple[float, dict]] = {}  # index URL -> (fetched at, entries)
_LOCK = threading.Lock()
# dpkg's package states with files on disk (not "not-installed" nor "config-files")
_ON_DISK = {
  "installed", "unpacked", "half-configured", "half-installed", "triggers-awaited",
  "triggers-pending",
}  # fmt: skip


def installed(text: str) -> dict[tuple[str, str], str]:
  """{(package, architecture): version} of the packages of a dpkg status text whose files may
  be on disk: installed, and those an interrupted dpkg or a failed maintainer script left
  unpacked or half-configured (their files are each checked all the same). A later stanza of
  the same package wins (dpkg's journal after its status)."""
  found = {}
  for stanza in text.split("\n\n"):
    f = {}
    for line in stanza.splitlines():
      key, sep, val = line.partition(":")
      if sep and not line[:1].isspace():
        f[key.strip().lower()] = val.strip()
    if "package" in f:
      state = f.get("status", "").rpartition(" ")[2]
      found[(f["package"], f.get("architecture", "all"))] = (state, f.get("version", ""))
  return {k: v for k, (state, v) in found.items() if state in _ON_DISK}


def journal(view: RootView) -> list[str]:
  """dpkg's journal (`updates/NNNN`, numeric order): what a dpkg that stopped before folding
  it into the status had recorded (a package it unpacked, say)."""
  names = [n for n in view.listdir(UPDATES) if n.isdigit()]
  return [f"{UPDATES}/{n}" for n in sorted(names, key=int)]


def status_text(view: RootView) -> str:
  """dpkg's status with its journal applied, as dpkg itself reads them."""
  parts = [view.read(p) or b"" for p in [STATUS, *journal(view)]]
  return "\n\n".join(b.decode("utf-8", "replace") for b in parts)


def new_packages(view: RootView) -> tuple[list[tuple[str, str, str]], set[str]]:
  """(package, version, architecture) installed in the sandbox but not so in the image, and
  the image's own architectures."""
  now = installed(status_text(view))
  image = RootView(view.lowers[0], view.lowers[1:]) if view.lowers else None
  was = installed(status_text(image)) if image else {}
  archs = {a for _, a in was if _NAME.fullmatch(a)} - {"all"}
  return sorted((p, v, a) for (p, a), v in now.items() if was.get((p, a)) != v), archs


def index_urls(sources: PackageSources, archs: set[str]) -> list[str]:
  """Candidate Packages indexes of the sandbox's apt URIs: the machine's suites and
  components for each (stanzas of its release), then the flat layout."""
  out = []
  try:
    stanzas = apt_sources.stanzas_for(apt_sources.host_codename())
  except (OSError, RuntimeError):
    stanzas = []
  for stanza in stanzas:
    f = {}
    for line in stanza.splitlines():
      key, _, val = line.partition(":")
      f[key.strip().lower()] = val.split()
    for uri in f.get("uris", []):
      if uri not in sources.apt_uris:
        continue
      for suite in f.get("suites", []):
        for comp in f.get("components", []):
          out += [f"{uri.rstrip('/')}/dists/{suite}/{comp}/binary-{a}/Packages" for a in archs]
  return out + [f"{uri.rstrip('/')}/Packages" for uri in sources.apt_uris]


def _get(url: str) -> bytes | None:
  try:
    with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as r:
      return r.read()
  except (OSError, ValueError):
    return None


def _index(url: str) -> dict[tuple[str, str, str], tuple[str, str]]:
  """{(package, version, arch): (Filename, SHA256)} of one Packages index (kept an hour)."""
  with _LOCK:
    hit = _INDEXES.get(url)
  if hit and time.monotonic() - hit[0] < _INDEX_TTL_S:
    return hit[1]
  text = b""
  for ext, unpack in ((".xz", lzma.decompress), (".gz", gzip.decompress), ("", bytes)):
    data = _get(url + ext)
    if data is not None:
      try:
        text = unpack(data)
        break
      except (lzma.LZMAError, OSError, EOFError):
        continue
  out = {}
  for stanza in text.decode("utf-8", "replace").split("\n\n"):
    f = dict(ln.split(": ", 1) for ln in stanza.splitlines() if ": " in ln and ln[0] != " ")
    if {"Package", "Version", "Filename", "SHA256"} <= f.keys():
      key = (f["Package"], f["Version"], f.get("Architecture", "all"))
      out[key] = (f["Filename"], f["SHA256"])
  with _LOCK:
    _INDEXES[url] = (time.monotonic(), out)
  return out


def _deb_members(path: str) -> dict[str, str]:
  """{member path: "f:<sha256>" | "l:<target>"} of a .deb's data archive."""
  p = subprocess.Popen(["dpkg-deb", "--fsys-tarfile", path], stdout=subprocess.PIPE)
  out = {}
  try:
    with tarfile.open(fileobj=p.stdout, mode="r|") as tar:
      for m in tar:
        name = os.path.normpath(m.name).lstrip("/")
        if name == ".":
          continue
        if m.issym():
          out[name] = f"l:{m.linkname}"
        elif m.islnk():
          out[name] = out.get(os.path.normpath(m.linkname).lstrip("/"), "hardlink")
        elif m.isfile():
          h, f = hashlib.sha256(), tar.extractfile(m)
          while chunk := f.read(1 << 20):
            h.update(chunk)
          out[name] = f"f:{h.hexdigest()}"
  finally:
    p.stdout.close()
    if p.wait(timeout=_TIMEOUT_S) != 0:
      raise OSError(f"dpkg-deb --fsys-tarfile {os.path.basename(path)} failed")
  return out


def _conffiles(path: str) -> list[str]:
  """The conffiles a .deb's control archive lists (relative to /)."""
  p = subprocess.Popen(["dpkg-deb", "--ctrl-tarfile", path], stdout=subprocess.PIPE)
  out = []
  try:
    with tarfile.open(fileobj=p.stdout, mode="r|") as tar:
      for m in tar:
        if os.path.normpath(m.name) == "conffiles" and m.isfile():
          text = tar.extractfile(m).read(1 << 20).decode("utf-8", "replace")
          # a line is a path, or a flag and the path ("remove-on-upgrade /etc/x")
          out = [ln.split()[-1].lstrip("/") for ln in text.splitlines() if ln.strip()]
  finally:
    p.stdout.close()
    if p.wait(timeout=_TIMEOUT_S) != 0:
      raise OSError(f"dpkg-deb --ctrl-tarfile {os.path.basename(path)} failed")
  return [c for c in out if c and os.path.normpath(c) == c]


def _staged(found: dict[str, str], conffiles: list[str]) -> dict[str, str]:
  """`found` plus each conffile as dpkg unpacks it (`X.dpkg-new`, moved to X only when the
  package is configured): what an interrupted dpkg leaves of a genuine package."""
  return found | {f"{c}.dpkg-new": found[c] for c in conffiles if found.get(c, "")[:2] == "f:"}


def fetch(pkg: tuple[str, str, str], archs: set[str], sources: PackageSources, cache: str):
  """(members of the genuine .deb of (package, version, arch), "") or (None, why not);
  `archs`: the indexes to read for an architecture-independent package."""
  name, version, arch = pkg
  if not _NAME.fullmatch(name) or not _NAME.fullmatch(arch):
    return None, f"{name}: not a package name"
  for url in index_urls(sources, {arch} - {"all"} or archs):
    entry = _index(url).get(pkg)
    if entry is None:
      continue
    filename, sha = entry
    path = os.path.join(cache, "apt", f"{sha}.v2.json")  # v2: with staged conffiles
    if (hit := genuine_cache.load(path)) is not None:
      return hit, ""
    base = url.rsplit("/dists/", 1)[0] if "/dists/" in url else url.rsplit("/", 1)[0]
    data = _get(urllib.parse.urljoin(base + "/", filename))
    if data is None or hashlib.sha256(data).hexdigest() != sha:
      return None, f"{name} {version}: the .deb is missing or differs from the index"
    try:  # a full host disk is a note naming it (the package stays flagged), not a crash
      with tempfile.NamedTemporaryFile(suffix=".deb") as tmp:
        tmp.write(data)
        tmp.flush()
        found = _staged(_deb_members(tmp.name), _conffiles(tmp.name))
    except (OSError, tarfile.TarError) as e:
      return None, f"{name} {version}: the host could not read the .deb ({e})"
    genuine_cache.keep(path, found)
    return found, ""
  return None, f"{name} {version} ({arch}): in no index of the sandbox's apt sources"


def genuine_files(
  view: RootView, sources: PackageSources, cache: str
) -> tuple[dict[str, set[str]], list[str]]:
  """({path: genuine contents}, notes) of the packages the sandbox installed or changed."""
  genuine: dict[str, set[str]] = {}
  notes, landed = [], {}
  pkgs, archs = new_packages(view)
  for pkg in pkgs:
    found, why = fetch(pkg, archs, sources, cache)
    if found is None:
      notes.append(why)
      continue
    for rel, content in found.items():
      folder, _, leaf = rel.rpartition("/")
      if folder not in landed:  # where dpkg's write lands: through the root's folder links
        landed[folder] = view.resolve(folder) if folder else ""
      if landed[folder] is not None:
        path = f"{landed[folder]}/{leaf}" if landed[folder] else leaf
        genuine.setdefault(path, set()).add(content)
  return genuine, notes
