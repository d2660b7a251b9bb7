"""The machine's configured apt sources, filtered to one Debian/Ubuntu release for mmdebstrap.

Never hard-codes a mirror: every URI comes from /etc/apt/sources.list(.d). Hand-written because
the deb822 parser (python-debian / python3-apt) is not importable from a pip environment.
"""

from __future__ import annotations

import pathlib
import subprocess

APT_DIR = pathlib.Path("/etc/apt")
# Host apt options worth forwarding to mmdebstrap's own apt (proxies, snapshot mirrors).
_FORWARD = (
  "Acquire::http::Proxy",
  "Acquire::https::Proxy",
  "Acquire::ftp::Proxy",
  "Acquire::Check-Valid-Until",
  "Acquire::Check-Date",
  "Acquire::Retries",
)


def host_codename() -> str:
  for line in pathlib.Path("/etc/os-release").read_text().splitlines():
    if line.startswith("VERSION_CODENAME="):
      name = line.split("=", 1)[1].strip().strip('"')
      if name:
        return name
  raise RuntimeError("/etc/os-release has no VERSION_CODENAME: pass an explicit suite")


def _suite_ok(suite: str, codename: str) -> bool:
  return suite == codename or suite.startswith(codename + "-") or suite.startswith(codename + "/")


def _deb822_stanzas(text: str) -> list[dict[str, str]]:
  """Parses deb822 stanzas (fields with continuation lines; '#' comments dropped)."""
  stanzas, cur, key = [], {}, None
  for raw in text.splitlines() + [""]:
    if raw.startswith("#"):
      continue
    if not raw.strip():
      if cur:
        stanzas.append(cur)
      cur, key = {}, None
    elif raw[0] in " \t" and key is not None:
      cur[key] += "\n" + raw
    elif ":" in raw:
      key, val = raw.split(":", 1)
      key = key.strip()
      cur[key] = val.strip()
  return stanzas


def _from_deb822(text: str, codename: str) -> list[str]:
  out = []
  for st in _deb822_stanzas(text):
    f = {k.lower(): v for k, v in st.items()}
    if "deb" not in f.get("types", "").split() or f.get("enabled", "yes").lower() == "no":
      continue
    suites = [s for s in f.get("suites", "").split() if _suite_ok(s, codename)]
    if not suites:
      continue
    keep = {k: v for k, v in st.items() if k.lower() not in ("types", "suites")}
    lines = ["Types: deb", "Suites: " + " ".join(suites)]
    lines += [f"{k}: {v}" for k, v in keep.items()]
    out.append("\n".join(lines))
  return out


def _from_one_line(text: str, codename: str) -> list[str]:
  """Converts one-line `deb [opts] uri suite comps` entries to deb822 stanzas."""
  out = []
  for raw in text.splitlines():
    line = raw.split("#", 1)[0].strip()
    if not line.startswith("deb "):
      continue
    rest, opts = line[4:].strip(), {}
    if rest.startswith("["):
      inner, rest = rest[1:].split("]", 1)
      for o in inner.split():
        if "=" in o:
          k, v = o.split("=", 1)
          opts[k] = v
    parts = rest.split()
    if len(parts) < 2 or not _suite_ok(parts[1], codename):
      continue
    lines = ["Types: deb", f"URIs: {parts[0]}", f"Suites: {parts[1]}"]
    lines.append("Components: " + " ".join(parts[2:] or ["main"]))
    names = {"signed-by": "Signed-By", "arch": "Architectures", "trusted": "Trusted"}
    lines += [f"{names.get(k, k)}: {v.replace(',', ' ')}" for k, v in opts.items()]
    out.append("\n".join(lines))
  return out


def stanzas_for(codename: str, apt_dir: pathlib.Path = APT_DIR) -> list[str]:
  """deb822 stanzas of every enabled `deb` source of release `codename` on this machine."""
  out = []
  main = apt_dir / "sources.list"
  if main.is_file():
    out += _from_one_line(main.read_text(), codename)
  d = apt_dir / "sources.list.d"
  for p in sorted(d.iterdir()) if d.is_dir() else []:
    if p.suffix == ".list":
      out += _from_one_line(p.read_text(), codename)
    elif p.suffix == ".sources":
      out += _from_deb822(p.read_text(), codename)
  return out


def write_sources(dest_dir: pathlib.Path, codename: str) -> pathlib.Path:
  """Writes `<dest_dir>/agentrl.sources` for mmdebstrap; raises if the machine has none."""
  stanzas = stanzas_for(codename)
  if not stanzas:
    raise RuntimeError(
      f"no apt source for release {codename!r} in {APT_DIR}/sources.list(.d): "
      "mmdebstrap builds the image from the machine's configured apt sources"
    )
  path = dest_dir / "agentrl.sources"
  path.write_text("\n\n".join(stanzas) + "\n")
  return path


def forwarded_apt_options() -> list[str]:
  """Host apt settings (proxies, snapshot-mirror date checks) as `--aptopt` values."""
  try:
    dump = subprocess.run(["apt-config", "dump"], capture_output=True, text=True, check=True)
  except (OSError, subprocess.CalledProcessError):
    return []
  out = []
  for line in dump.stdout.splitlines():
    key, _, val = line.partition(" ")
    if key in _FORWARD and val.endswith(";"):
      out.append(f"{key} {val}")
  return out
