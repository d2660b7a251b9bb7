"""The base images task Dockerfiles build on: which ones map onto the project's base image, and
the WORKDIR / ENV of public bases that task Dockerfiles inherit without repeating them.

Language images (gcc, golang, eclipse-temurin, openjdk, node, rust, maven) are Debian or
Ubuntu plus one toolchain: they map onto the base image plus the distribution's package of
that toolchain (installed into the task's package layer), with the image's ENV where a task
may read it, and those built on buildpack-deps also get its layers' common packages (as does
buildpack-deps itself). The toolchain's version is the distribution's (a warning says so).
"""

from __future__ import annotations

import platform
import posixpath
import re

from envs.formats.dockerfile_syntax import DockerfileError

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_NAMES = ("debian", "ubuntu", "python", "buildpack-deps")
TOOLCHAIN_NAMES = ("gcc", "golang", "eclipse-temurin", "openjdk", "node", "rust", "maven")
# WORKDIR / ENV of public base images that task Dockerfiles build on without repeating them.
TBENCH_PREFIX = "ghcr.io/laude-institute/t-bench/"  # Terminal-Bench's own base images
KNOWN_BASES: tuple[tuple[str, str | None, tuple[tuple[str, str], ...]], ...] = (
  (TBENCH_PREFIX, "/app", ()),
  ("python:", None, (("LANG", "C.UTF-8"),)),
)


def repo_tag(image: str) -> tuple[str, str]:
  """(repository name, tag) of an image reference: `ghcr.io/x/py-3:1@sha` -> ("py-3", "1")."""
  repo, _, tag = image.split("/")[-1].split("@")[0].partition(":")
  return repo, tag


def map_base(image: str, file: str, line: int, text: str) -> str:
  """The image itself when it is Debian-like; `DockerfileError` otherwise."""
  repo, tag = repo_tag(image)
  names = BASE_NAMES + TOOLCHAIN_NAMES
  ok = repo in names or any(repo.startswith(b + "-") for b in BASE_NAMES)
  if not ok or any(t in tag for t in ("alpine", "windows", "nanoserver", "ubi", "oracle")):
    raise DockerfileError(
      file,
      line,
      text,
      f"base image {image!r} is not Debian, Ubuntu or python-slim; it cannot be mapped onto the base image",
    )
  return image


def _jdk(tag: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
  major = re.match(r"\d+", tag)
  major = major.group(0) if major else "17"
  arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
  home = f"/usr/lib/jvm/java-{major}-openjdk-{arch}"
  return (f"openjdk-{major}-jdk-headless",), (("JAVA_HOME", home),)


# The layers of buildpack-deps (`<suite>-curl`, `<suite>-scm`, `<suite>`), which gcc, golang,
# node and rust images (not their -slim tags) are built on: tasks use what they bring
# (openssl through ca-certificates, git, a C compiler). The full layer's long tail of -dev
# libraries (imagemagick, postgres, ...) is cut to the common build set.
BUILDPACK_CURL = ("ca-certificates", "curl", "gnupg", "netbase", "wget")
BUILDPACK_SCM = BUILDPACK_CURL + ("git", "openssh-client", "procps")
BUILDPACK_FULL = BUILDPACK_SCM + (
  "autoconf", "automake", "bzip2", "dpkg-dev", "file", "g++", "gcc", "libbz2-dev", "libc6-dev",
  "libffi-dev", "liblzma-dev", "libreadline-dev", "libsqlite3-dev", "libssl-dev", "libtool",
  "make", "patch", "unzip", "xz-utils", "zlib1g-dev",
)  # fmt: skip


def _buildpack(repo: str, tag: str) -> tuple[str, ...]:
  """The buildpack-deps packages under `repo:tag` (none for -slim tags and other images)."""
  if "slim" in tag or repo not in ("buildpack-deps", "gcc", "golang", "node", "rust"):
    return ()
  if repo == "golang" or tag.endswith("scm"):
    return BUILDPACK_SCM
  return BUILDPACK_CURL if tag.endswith("curl") else BUILDPACK_FULL


# Terminal-Bench's own base images (ghcr.io/laude-institute/t-bench/*) are a public image plus
# what its harness drives the container with: tmux (the agent's session), asciinema (the
# recording) and curl. Task tests check for them (`which tmux`), so the replay installs them.
TBENCH_PACKAGES = ("tmux", "asciinema", "curl")


def toolchain(image: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]] | None:
  """(apt packages, ENV) standing in for a language image's toolchain (and the buildpack-deps
  layers it is built on), or for a Terminal-Bench base image's harness tools; or None."""
  if image.startswith(TBENCH_PREFIX):
    return TBENCH_PACKAGES, ()
  repo, tag = repo_tag(image)
  layer = _buildpack(repo, tag)
  tool = _toolchain(repo, tag)
  if tool is None:
    return (layer, ()) if layer else None
  pkgs, env = tool
  return layer + tuple(p for p in pkgs if p not in layer), env


def _toolchain(repo: str, tag: str) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]] | None:
  if repo == "gcc":
    return ("gcc", "g++", "make"), ()
  if repo == "golang":
    return ("golang-go",), (("GOPATH", "/go"), ("PATH", "/go/bin:" + DEFAULT_PATH))
  if repo in ("eclipse-temurin", "openjdk"):
    return _jdk(tag)
  if repo == "maven":
    jdk = re.search(r"(?:openjdk|temurin|eclipse-temurin)-(\d+)", tag)
    pkgs, env = _jdk(jdk.group(1) if jdk else "17")
    return ("maven",) + pkgs, env
  if repo == "node":
    return ("nodejs", "npm"), ()
  if repo == "rust":
    return ("rustc", "cargo"), ()
  return None


def is_python(image: str) -> bool:
  """Whether `image` is an official python:* image (or t-bench's python-3-13, built on one)."""
  return repo_tag(image)[0].startswith("python")


def python_pip(image: str) -> tuple[str, ...]:
  """The pip packages `image` has beyond the distribution's python3: the official python:*
  images install pip for their Python (`pip`, `pip3`, `pip3.X` in /usr/local/bin); Debian's and
  Ubuntu's have none. Installed into the task's package layer from the machine's pip sources."""
  return ("pip",) if is_python(image) else ()


def python_version(image: str) -> str | None:
  """The Python version a python:* image's tag names (`python:3.12-slim` -> "3.12", t-bench's
  `python-3-13` -> "3.13"); None for other images and tags that name none (`python:3`)."""
  repo, tag = repo_tag(image)
  m = re.match(r"(3)\.(\d+)", tag) if repo == "python" else re.fullmatch(r"python-(3)-(\d+)", repo)
  return f"{m.group(1)}.{m.group(2)}" if m else None


def python_link(image: str) -> str:
  """Setup lines that give `python` the place it has in `image`: the public images have no
  /usr/bin/python (a step `ln -s /usr/bin/python3 /usr/bin/python` must work, as in Docker),
  and python:* images keep theirs in /usr/local/bin. The base image's python-is-python3 link
  moves accordingly where the root is writable (the container-like mode). A python:* image's
  Python is its own build, with no EXTERNALLY-MANAGED marker (`pip install x` as root works);
  Debian's python3 keeps the marker, as in Debian-based images. A python:3.X image's own paths
  name the replayed interpreter's (links): /usr/local/bin/python3, python3.X and pip3.X, and
  /usr/local/lib/python3.X/site-packages, the folder where the package layer put pip, so a
  step `rm -rf /usr/local/lib/python3.X/site-packages/pip` removes the pip the tests use."""
  lines = ["if [ -L /usr/bin/python ] && [ -w /usr/bin ]; then rm -f /usr/bin/python; fi"]
  if is_python(image):
    lines.append(
      "[ -e /usr/local/bin/python ] || ! [ -w /usr/local/bin ] || "
      "ln -s /usr/bin/python3 /usr/local/bin/python"
    )
    lines.append("[ -w /usr/lib ] && rm -f /usr/lib/python3*/EXTERNALLY-MANAGED || :")
  if (ver := python_version(image)) is not None:
    lib, bin_ = f"/usr/local/lib/python{ver}", "/usr/local/bin"
    site = "/usr/local/lib/python$v/dist-packages"  # layers.py: the image Python's pip target
    lines.append(
      f"if [ -w /usr/local/lib ] && [ -w {bin_} ] && "
      "v=$(/usr/bin/python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])'); then "
      f"mkdir -p {site} {lib}; [ -e {lib}/site-packages ] || ln -s {site} {lib}/site-packages; "
      f"for p in python3 python{ver}; do [ -e {bin_}/$p ] || ln -s /usr/bin/python3 {bin_}/$p; done; "
      f"[ -e {bin_}/pip{ver} ] || ! [ -e {bin_}/pip3 ] || ln -s pip3 {bin_}/pip{ver}; fi"
    )
  return "\n".join(lines)


# Folders the public Debian/Ubuntu images have although their slim builds drop the files in them
# (debuerreotype keeps the folders): a step `mv x.1 /usr/share/man/man1/` must work as in Docker.
SKELETON = tuple(f"/usr/share/man/man{i}" for i in range(1, 9)) + (
  "/usr/share/doc",
  "/usr/share/info",
  "/usr/share/locale",
  "/usr/share/lintian/overrides",
)


# Where images keep caches, logs and docs that Dockerfiles clean up (`rm -rf
# /var/lib/apt/lists/*`): such an `rm` is dropped (the base image's are part of it, and the
# read-only mode could not remove them); any other system path is removed as in Docker.
CACHE_PREFIXES = (
  "/var/lib/apt/lists", "/var/cache", "/var/log", "/var/tmp", "/root/.cache", "/usr/share/doc",
  "/usr/share/man", "/usr/share/info", "/usr/share/locale",
)  # fmt: skip


def cache_path(path: str) -> bool:
  """Whether an `rm` operand names a cache, log or doc folder (or a user's ~/.cache)."""
  p = posixpath.normpath(path)
  return (
    path.startswith("~")
    or "/.cache" in p
    or any(p == c or p.startswith(c + "/") for c in CACHE_PREFIXES)
  )


def skeleton(image: str) -> str:
  """A setup line that makes the public images' folder skeleton where the root is writable."""
  del image  # every base the replay takes is Debian or Ubuntu (map_base refuses the others)
  return f"[ -w /usr/share ] && mkdir -p {' '.join(SKELETON)} 2>/dev/null || :"


def base_user() -> str:
  """A setup line that removes the base image's own user `agent` (uid 1000, the read-only
  mode's user), which no public image has, where /etc/passwd is writable (the container-like
  mode, as root), so a step `useradd -m -u 1000 agent` replays as in Docker."""
  return (
    "if [ -w /etc/passwd ] && id -u agent >/dev/null 2>&1; then "
    "userdel -r agent >/dev/null 2>&1 || userdel agent; fi"
  )
