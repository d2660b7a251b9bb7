"""Per-task image layers: the apt and pip packages of a SandboxSpec, installed at *build* time.

A package layer is the base tree copied and the packages installed into it with the network
(the only time a task tree sees one), from the machine's own configured apt sources
(apt_sources.py) and the host pip's own configuration (pip.conf, PIP_INDEX_URL): nothing here
names a host. Layers are cached by a hash of (base image, sorted package lists, version); a
builder works in a private folder and publishes with an atomic rename under a lock, so
concurrent processes build a layer once. Sandboxes of both backends then use the layer like
any image (Docker imports its tree). A package that does not exist fails, naming it.
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

from envs.sandbox import apt_sources, common
from envs.sandbox import image as image_lib
from envs.sandbox.base import PackageMissingError, SandboxError

PACKAGES_VERSION = 2  # 2: recommends installed unless the task's line turned them off
_BUILD_SRC = "/tmp/agentrl-build.sources"
_BUILD_CONF = "/etc/apt/apt.conf.d/99agentrl-build"


def resolve_spec_image(spec, setup_runner) -> image_lib.Image:
  """The image a spec runs: base, then its package layer, then its setup-script layer."""
  img = image_lib.resolve(spec.image)
  if spec.apt_packages or spec.pip_packages:
    norec = tuple(spec.apt_no_recommends)
    img = with_packages(img, tuple(spec.apt_packages), tuple(spec.pip_packages), norec)
  if spec.setup_script:
    img = image_lib.with_setup(img, spec.setup_script, setup_runner)
  return img


def packages_id(
  base_id: str, apt: tuple[str, ...], pip: tuple[str, ...], norec: tuple[str, ...] = ()
) -> str:
  blob = {"base": base_id, "apt": sorted(set(apt)), "pip": sorted(set(pip))}
  blob["norec"] = sorted(set(norec) & set(apt))
  blob["v"] = PACKAGES_VERSION
  return "p" + hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:15]


def with_packages(
  base: image_lib.Image, apt: tuple[str, ...], pip: tuple[str, ...], norec: tuple[str, ...] = ()
):
  """The layer `base` + packages (built once, then cached); `norec`: apt packages installed
  without their recommends (the others get them, as Debian's apt does by default)."""
  pid = packages_id(base.id, apt, pip, norec)
  img = image_lib.Image(pid, image_lib.cache_root() / pid)
  if (img.dir / "meta.json").exists() and img.rootfs.is_dir():
    return img
  with image_lib.Lock(image_lib.cache_root() / f"{pid}.lock"):
    if (img.dir / "meta.json").exists() and img.rootfs.is_dir():
      return img
    image_lib.ensure_rootfs(base)
    work = image_lib.cache_root() / f".{pid}.build-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
      tree = work / "rootfs"
      subprocess.run(["cp", "-a", "--reflink=auto", str(base.rootfs), str(tree)], check=True)
      t0 = time.monotonic()
      if apt:
        _apt_install(tree, sorted(set(apt)), set(norec))
      if pip:
        _pip_install(tree, sorted(set(pip)))
      meta = {"id": pid, "base": base.id, "apt": sorted(set(apt)), "pip": sorted(set(pip))}
      meta["built"], meta["build_s"] = time.time(), time.monotonic() - t0
      (work / "meta.json").write_text(json.dumps(meta, indent=1))
      shutil.rmtree(img.dir, ignore_errors=True)
      os.replace(work, img.dir)
    finally:
      shutil.rmtree(work, ignore_errors=True)
  return img


def _in_tree(tree: pathlib.Path, script: str) -> subprocess.CompletedProcess:
  """Runs `script` as root in `tree` with the host's network (build time only)."""
  a = ["bwrap", "--unshare-pid", "--unshare-ipc"]  # as host root: real owners (dpkg chowns)
  if os.geteuid() != 0:
    a += ["--unshare-user", "--uid", "0", "--gid", "0"]
  a += ["--die-with-parent", "--bind", str(tree), "/", "--proc", "/proc", "--dev", "/dev"]
  a += ["--tmpfs", "/tmp", "--ro-bind", "/etc/resolv.conf", "/etc/resolv.conf"]
  if os.geteuid() == 0:
    a += ["--cap-add", "ALL"]
  a += ["--clearenv", "--setenv", "PATH", common.PATH, "--setenv", "HOME", "/root"]
  a += ["--setenv", "DEBIAN_FRONTEND", "noninteractive"]
  return subprocess.run(
    [*a, "/bin/sh", "-ec", script], capture_output=True, text=True, timeout=1800
  )  # fmt: skip


def _apt_install(tree: pathlib.Path, pkgs: list[str], norec: set[str] = frozenset()) -> None:
  codename = apt_sources.host_codename()
  stanzas = apt_sources.stanzas_for(codename)
  if not stanzas:
    raise SandboxError(f"no apt source for {codename!r} on this machine: cannot install {pkgs}")
  opts = "".join(f"{o}\n" for o in apt_sources.forwarded_apt_options())
  (tree / "etc/apt/apt.conf.d").mkdir(parents=True, exist_ok=True)
  (tree / _BUILD_CONF.lstrip("/")).write_text(opts)
  src = f"-o Dir::Etc::SourceList={_BUILD_SRC} -o Dir::Etc::SourceParts=/nonexistent"
  src += " -o APT::Sandbox::User=root"  # no _apt uid switch inside a build namespace
  names = " ".join(pkgs)
  rec, plain = [p for p in pkgs if p not in norec], [p for p in pkgs if p in norec]
  script = (
    f"cat > {_BUILD_SRC} <<'EOF'\n" + "\n\n".join(stanzas) + "\nEOF\n"
    f"apt-get {src} -q update\n"
    + (f"apt-get {src} -q -y --no-install-recommends install {' '.join(plain)}\n" if plain else "")
    + (f"apt-get {src} -q -y install {' '.join(rec)}\n" if rec else "")
    + "apt-get clean; rm -rf /var/lib/apt/lists/*"
  )
  try:
    p = _in_tree(tree, script)
  finally:
    (tree / _BUILD_CONF.lstrip("/")).unlink(missing_ok=True)
  if p.returncode != 0:
    if missing := missing_packages("apt", p.stderr):
      raise PackageMissingError(f"apt: {'; '.join(missing)} (the task's packages, not retried)")
    raise SandboxError(f"apt-get install {names} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")


# What apt-get and pip print when the task asks for something no source has: deterministic, so
# the task's error at once (task_error), never an infrastructure error retried for minutes.
_MISSING = {
  "apt": (
    (r"Unable to locate package (\S+)", "no package {}"),
    (r"Package '?(\S+?)'? has no installation candidate", "{} has no installation candidate"),
    (r"Version '([^']+)' for '([^']+)' was not found", "no version {0} of {1}"),
    (r"Couldn't find any package by (?:glob|regex) '([^']+)'", "no package matches {}"),
    (
      r"(\S+) : Depends: (.+?) but it is not installable",
      "{0} depends on {1}, which no source has",
    ),
  ),
  "pip": (
    (r"No matching distribution found for (\S+)", "no distribution of {}"),
    (r"Invalid requirement: '?([^'\n]+)'?", "invalid requirement {}"),
    (r"Could not open requirements file: [^:]*: ([^\n]+)", "no requirements file {}"),
    (r"Cannot install (.+?) because these package versions have conflicting", "conflicting {}"),
  ),
}


def missing_packages(tool: str, stderr: str) -> list[str]:
  """What `tool` ("apt" or "pip") says does not exist in its sources, from its stderr."""
  out = []
  for pattern, what in _MISSING[tool]:
    out += [what.format(*m.groups()) for m in re.finditer(pattern, stderr)]
  return list(dict.fromkeys(out))


def _image_python(tree: pathlib.Path) -> str:
  found = sorted(tree.glob("usr/lib/python3.*/"), key=lambda p: p.name)
  vers = [p.name[len("python") :] for p in found if re.fullmatch(r"python3\.\d+", p.name)]
  if not vers:
    raise SandboxError("the image has no python3: pip_packages need one (add apt python3)")
  return vers[-1]


def _pip_install(tree: pathlib.Path, pkgs: list[str]) -> None:
  """Installs with the host's pip into the image's site folder (for the image's Python)."""
  ver = _image_python(tree)
  target = tree / f"usr/local/lib/python{ver}/dist-packages"
  staging = tree / "tmp/agentrl-pip"
  cmd = [sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
  cmd += ["--no-input", "--target", str(staging)]
  if ver != f"{sys.version_info.major}.{sys.version_info.minor}":
    cmd += ["--python-version", ver, "--only-binary=:all:"]
  p = subprocess.run([*cmd, *pkgs], capture_output=True, text=True, timeout=1800)
  if p.returncode != 0:
    if missing := missing_packages("pip", p.stderr):
      raise PackageMissingError(f"pip: {'; '.join(missing)} (the task's packages, not retried)")
    raise SandboxError(f"pip install {pkgs} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
  target.mkdir(parents=True, exist_ok=True)
  bindir = tree / "usr/local/bin"
  bindir.mkdir(parents=True, exist_ok=True)
  for item in staging.iterdir():
    if item.name == "bin":  # console scripts: the image's python, on the image's PATH
      for script in item.iterdir():
        text = script.read_bytes()
        if text.startswith(b"#!"):
          text = b"#!/usr/bin/python3" + text[text.index(b"\n") :]
        (bindir / script.name).write_bytes(text)
        (bindir / script.name).chmod(0o755)
      continue
    shutil.move(str(item), str(target / item.name))
  shutil.rmtree(staging, ignore_errors=True)
