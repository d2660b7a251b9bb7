"""The machine's configured package sources: what a `network="packages"` sandbox may reach.

pip's sources are its effective index settings (`pip config list`, which already folds in
PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS and PIP_TRUSTED_HOST and every pip.conf);
apt's are the enabled `deb` sources of the host's release in /etc/apt/sources.list(.d)
(apt_sources.py). An http(s) source becomes an allow-list entry (host, port) of the egress
proxy; a local one (file:// URL or plain path) becomes a folder bound read-only into the
sandbox at the same path. pip's built-in default index counts only where the machine names it
(index-url): nothing here names a host.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import subprocess
import sys
import threading
import urllib.parse

from envs.sandbox import apt_sources

PROXY_PORT = 13128  # the proxy's port on the sandbox's own loopback (an unlikely task port)
# The sandbox's own names never go through the proxy (a task's local servers stay local).
NO_PROXY = "localhost,127.0.0.1,::1"
_DEFAULT_PORTS = {"http": 80, "https": 443}
# pip option -> the sections that set it, highest precedence first (`pip config list` names)
_PIP_SECTIONS = (":env:", "install", "global")


@dataclasses.dataclass(frozen=True)
class PackageSources:
  """Package sources: pip indexes (first = pip's index-url), find-links, trusted hosts, and
  the apt source URIs; each an http(s) URL, a file:// URL or a local path."""

  pip_indexes: tuple[str, ...] = ()
  pip_find_links: tuple[str, ...] = ()
  pip_trusted_hosts: tuple[str, ...] = ()
  apt_uris: tuple[str, ...] = ()

  def _all(self) -> tuple[str, ...]:
    return self.pip_indexes + self.pip_find_links + self.apt_uris

  def endpoints(self) -> frozenset[tuple[str, int]]:
    """(host, port) of every http(s) source: the proxy's allow-list."""
    return frozenset(e for u in self._all() if (e := endpoint(u)) is not None)

  def folders(self) -> tuple[str, ...]:
    """Existing local folders of file sources, to bind read-only into the sandbox. A local
    pip index binds its parent: a simple index's links (`../../files/x.whl`) lead beside it."""
    out = []
    for u in self._all():
      path = local_path(u)
      if path and u in self.pip_indexes and path.count("/") > 1:
        path = path.rsplit("/", 1)[0]
      if path and pathlib.Path(path).is_dir() and path not in out:
        out.append(path)
    return tuple(out)

  def sandbox_env(self) -> dict[str, str]:
    """The proxy and pip settings of every exec in a packages-mode sandbox (apt reads
    http_proxy itself; its sources are the image's, built from the same machine's)."""
    proxy = f"http://127.0.0.1:{PROXY_PORT}"
    env = {k: proxy for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY")}
    env.update(no_proxy=NO_PROXY, NO_PROXY=NO_PROXY)
    if self.pip_indexes:
      env["PIP_INDEX_URL"] = self.pip_indexes[0]
      if self.pip_indexes[1:]:
        env["PIP_EXTRA_INDEX_URL"] = " ".join(self.pip_indexes[1:])
    elif self.pip_find_links:
      env["PIP_NO_INDEX"] = "1"  # no index is configured: never pip's built-in default
    if self.pip_find_links:
      env["PIP_FIND_LINKS"] = " ".join(self.pip_find_links)
    if self.pip_trusted_hosts:
      env["PIP_TRUSTED_HOST"] = " ".join(self.pip_trusted_hosts)
    return env


def endpoint(url: str) -> tuple[str, int] | None:
  """(lower-case host, port) of an http(s) URL; None for anything else."""
  u = urllib.parse.urlsplit(url)
  if u.scheme not in _DEFAULT_PORTS or not u.hostname:
    return None
  try:
    return u.hostname.lower(), u.port or _DEFAULT_PORTS[u.scheme]
  except ValueError:  # a port that is not a number
    return None


def local_path(url: str) -> str | None:
  """The folder of a file:// URL or an absolute path; None for anything else."""
  if url.startswith("file://"):
    return urllib.parse.unquote(urllib.parse.urlsplit(url).path).rstrip("/") or None
  return url.rstrip("/") if url.startswith("/") else None


def parse_pip_config(text: str) -> dict[str, tuple[str, ...]]:
  """The effective index-url, extra-index-url, find-links, trusted-host of `pip config list`
  output: per option the highest-precedence section's whitespace-separated values."""
  found: dict[tuple[str, str], str] = {}
  for line in text.splitlines():
    m = re.fullmatch(r"(\S*?)\.([\w-]+)=(['\"]?)(.*)\3", line.strip())
    if m:
      found[(m.group(1), m.group(2))] = m.group(4)
  out = {}
  for name in ("index-url", "extra-index-url", "find-links", "trusted-host"):
    val = next((found[(s, name)] for s in _PIP_SECTIONS if (s, name) in found), "")
    out[name] = tuple(val.split())
  return out


def from_machine(apt_dir: pathlib.Path = apt_sources.APT_DIR) -> PackageSources:
  """This machine's sources: the host pip's configuration and apt's sources of its release."""
  p = subprocess.run(
    [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True, timeout=120
  )
  pip = parse_pip_config(p.stdout if p.returncode == 0 else "")
  uris = []
  for stanza in apt_sources.stanzas_for(apt_sources.host_codename(), apt_dir):
    for line in stanza.splitlines():
      key, _, val = line.partition(":")
      if key.strip().lower() == "uris":
        uris += [u for u in val.split() if u not in uris]
  return PackageSources(
    pip_indexes=pip["index-url"] + pip["extra-index-url"],
    pip_find_links=pip["find-links"],
    pip_trusted_hosts=pip["trusted-host"],
    apt_uris=tuple(uris),
  )


_CURRENT: PackageSources | None = None
_LOCK = threading.Lock()


def current() -> PackageSources:
  """The sources packages-mode sandboxes get: set by `use`, else this machine's (read once)."""
  global _CURRENT
  with _LOCK:
    if _CURRENT is None:
      _CURRENT = from_machine()
    return _CURRENT


def use(sources: PackageSources | None) -> None:
  """Sets the sources of sandboxes created from now on (None: read the machine's again)."""
  global _CURRENT
  with _LOCK:
    _CURRENT = sources
