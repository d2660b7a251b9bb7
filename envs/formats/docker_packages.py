"""Package steps of a Dockerfile: the apt and pip packages a RUN line installs and the
setup-script prelude that checks the packages are in the image
(the per-task image layer installs them at build time; the sandbox has no network)."""

from __future__ import annotations

import dataclasses
import posixpath
import re

APT_NOOP = {
  "update",
  "upgrade",
  "dist-upgrade",
  "clean",
  "autoclean",
  "autoremove",
  "purge",
  "remove",
}
# pip install options followed by a value (`--retries 3`): the value is not a requirement.
PIP_VALUE_OPTIONS = frozenset(
  "-i --index-url --extra-index-url -c --constraint -t --target -f --find-links --retries "
  "--timeout --progress-bar --trusted-host --cache-dir --root --prefix --src --platform "
  "--python-version --implementation --abi --log --proxy --cert --client-cert --exists-action "
  "--upgrade-strategy --global-option --config-settings -C --python --report".split()
)
INSTALLER_URL = re.compile(r"astral\.sh/uv|get-pip\.py|install\.python-poetry|pypa\.io")


def apt_install(argv: list[str]) -> list[str] | None:
  """The packages of an `apt-get install` command line (versions dropped), or None."""
  if not argv or argv[0] not in ("apt-get", "apt", "aptitude"):
    return None
  sub = next((a for a in argv[1:] if not a.startswith("-")), "")
  if sub != "install":
    return None
  return [a.split("=")[0] for a in argv[2:] if not a.startswith("-") and a != "install"]


def no_recommends(argv: list[str]) -> bool:
  """Whether an apt-get install line turns recommends off (the flag, or its apt option)."""
  joined = " ".join(argv)
  return "--no-install-recommends" in argv or bool(
    re.search(r"APT::Install-Recommends=[\"']?(0|false|no)\b", joined, re.I)
  )


def apt_noop(argv: list[str]) -> bool:
  """apt housekeeping (update, clean, ...): dropped, the image layer holds the packages."""
  if not argv or argv[0] not in ("apt-get", "apt", "aptitude"):
    return False
  return next((a for a in argv[1:] if not a.startswith("-")), "") in APT_NOOP


def strip_prefix(argv: list[str]) -> list[str]:
  while argv and (re.match(r"^\w+=", argv[0]) or argv[0] in ("sudo", "env", "-E")):
    argv = argv[1:]
  return argv


_INDEX_OPTIONS = frozenset({"-i", "--index-url", "--extra-index-url", "-f", "--find-links"})
_FILE_OPTIONS = {
  "-r": "files",
  "--requirement": "files",
  "-c": "constraints",
  "--constraint": "constraints",
}
_LOCAL_LABEL = re.compile(r"(===?\s*[\w.!*]+)\+[\w.]+")  # torch==2.7.1+cpu: one index's build


@dataclasses.dataclass
class PipInstall:
  """A pip install command line, parsed as pip does."""

  reqs: list[str] = dataclasses.field(default_factory=list)
  files: list[str] = dataclasses.field(default_factory=list)  # -r FILE
  constraints: list[str] = dataclasses.field(default_factory=list)  # -c FILE
  notes: list[str] = dataclasses.field(default_factory=list)  # what was mapped or left out


def pip_install(argv: list[str]) -> PipInstall | None:
  """The parsed pip install of a command line (pip, pip3.X, python -m pip, uv pip), or None."""
  if argv[:3] == ["uv", "pip", "install"]:
    words = argv[3:]
  elif argv and re.fullmatch(r"pip3?(\.\d+)?", argv[0]) and argv[1:2] == ["install"]:
    words = argv[2:]
  elif (
    argv and re.fullmatch(r"python3?(\.\d+)?", argv[0]) and argv[1:4] == ["-m", "pip", "install"]
  ):
    words = argv[4:]
  else:
    return None
  out = PipInstall()
  _pip_words(words, out)
  return out


def _pip_words(words: list[str], out: PipInstall) -> None:
  it = iter(words)
  for w in it:
    opt, eq, val = w.partition("=") if w.startswith("--") else (w, "", "")
    if opt in _FILE_OPTIONS or opt in _INDEX_OPTIONS or opt in PIP_VALUE_OPTIONS:
      v = val if eq else next(it, "")
      if opt in _FILE_OPTIONS:
        getattr(out, _FILE_OPTIONS[opt]).append(v)
      elif opt in _INDEX_OPTIONS:  # never a host of ours: the layer uses the machine's config
        out.notes.append(f"pip {opt} {v}: packages come from this machine's pip sources")
    elif opt in ("-e", "--editable"):
      out.notes.append(f"pip editable install of {next(it, '')} is not replayed")
    elif w == "--pre":
      out.notes.append("pip --pre: pin a pre-release (==) to get one from the layer")
    elif not w.startswith("-"):  # flags (--break-system-packages, --user, -U) change nothing
      _requirement(w, out)


def _requirement(req: str, out: PipInstall) -> None:
  if re.match(r"^([\w.+-]+\s*@\s*)?(\w+\+)?\w+://", req):
    out.notes.append(f"pip requirement {req} is a URL (no network here): not installed")
  elif req.startswith((".", "/", "~")) or req.endswith((".whl", ".tar.gz", ".zip")):
    out.notes.append(f"pip install of the local path {req} is not replayed")
  else:
    plain = _LOCAL_LABEL.sub(r"\1", req)
    if plain != req:
      out.notes.append(f"pip {req}: local version label dropped ({plain})")
    out.reqs.append(plain)


def requirements_file(text: str) -> PipInstall:
  """A requirements (or constraints) file: one requirement or option line each."""
  out = PipInstall()
  for raw in text.splitlines():
    line = re.sub(r"(^|\s)#.*", "", raw).strip()
    if line.startswith("-"):
      _pip_words(line.split(), out)
    elif line:
      _requirement(line, out)
  return out


def constrained(reqs: list[str], constraints: list[str]) -> list[str]:
  """Requirements with a constraint file's pin where they name none."""
  pins = {re.split(r"[<>=!~\[; @]", c, maxsplit=1)[0].lower(): c for c in constraints}
  return [pins.get(r.lower(), r) if re.fullmatch(r"[\w.-]+", r) else r for r in reqs]


def pip_requirements(pi: PipInstall, context: dict) -> tuple[list[str], list[str]]:
  """(requirements, notes) of a pip install, its -r and -c files read from the build context
  (`context`: path -> FileEntry; a file is found by its path or, failing that, its name)."""
  cons, notes = [], list(pi.notes)
  reqs = list(pi.reqs)
  for kind, names in (("files", pi.files), ("constraints", pi.constraints)):
    for name in names:
      f = context.get(posixpath.normpath(name)) or next(
        (f for p, f in sorted(context.items()) if posixpath.basename(p) == name), None
      )
      if f is None:
        notes.append(f"pip file {name} is not in the build context: its packages not installed")
        continue
      got = requirements_file(f.data.decode(errors="replace"))
      (reqs if kind == "files" else cons).extend(got.reqs)
      notes += got.notes
  return constrained(reqs, cons), list(dict.fromkeys(notes))


PRELUDE = r"""set -u
agentrl_fail() {
  [ "$2" = 97 ] || echo "Dockerfile:$1: step cannot be replayed on the base image (exit $2): $3" >&2
  exit 97
}
agentrl_apt() {
  local line=$1 miss="" p; shift
  for p in "$@"; do
    p=${p%%:*}
    case "$p" in python-is-python3) command -v python >/dev/null && continue;; esac
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || miss="$miss $p"
  done
  [ -z "$miss" ] || { echo "Dockerfile:$line: apt package(s) not in the base image (no network to install):$miss" >&2; exit 97; }
}
agentrl_pip() {
  local line=$1; shift
  python3 - "$line" "$@" <<'PY' || exit 97
import importlib.metadata as md, re, sys
line, reqs, miss = sys.argv[1], [], []
for a in sys.argv[2:]:
  if a.startswith("-r"):
    reqs += [l.split("#")[0].strip() for l in open(a[2:]) if l.split("#")[0].strip() and not l.startswith("-")]
  else:
    reqs.append(a)
for r in reqs:
  name = re.split(r"[<>=!~\[; @]", r, maxsplit=1)[0]
  try:
    md.version(name)
  except md.PackageNotFoundError:
    miss.append(name)
if miss:
  sys.exit(f"Dockerfile:{line}: python package(s) not in the base image (no network to install): {' '.join(miss)}")
PY
}
agentrl_as() {  # a RUN after USER: the user (name[:group] or uid[:gid]) as Docker resolves it
  local line=$1 spec=$2 keep_home=$3 u g ent uid gid home groups; shift 3
  u=${spec%%:*}; g=""; case "$spec" in *:*) g=${spec#*:};; esac
  if ent=$(getent passwd "$u"); then
    IFS=: read -r _ _ uid gid _ home _ <<< "$ent"; groups=--init-groups
  elif [[ $u =~ ^[0-9]+$ ]]; then
    uid=$u gid=0 home=/ groups=--clear-groups
  else
    echo "Dockerfile:$line: USER $spec: no user $u at this step" >&2; exit 97
  fi
  if [ -n "$g" ]; then
    if ent=$(getent group "$g"); then gid=$(cut -d: -f3 <<< "$ent")
    elif [[ $g =~ ^[0-9]+$ ]]; then gid=$g
    else echo "Dockerfile:$line: USER $spec: no group $g" >&2; exit 97; fi
    groups=--clear-groups
  fi
  [ "$keep_home" = 1 ] && home=$HOME
  setpriv --reuid="$uid" --regid="$gid" "$groups" env HOME="$home" "$@"
}
export -f agentrl_apt agentrl_pip
"""
