"""The task root filesystem: built with mmdebstrap, cached by content hash, shared by backends.

Layout of the cache (`$AGENTRL_CACHE/images`, default `~/.cache/agentrl/images`):

  <id>/rootfs.tar   mmdebstrap's output (what `docker import` reads)
  <id>/rootfs/      the same tree extracted (what bubblewrap binds read-only at /)
  <id>/meta.json    the recipe, the apt sources used, build time
  <id>.lock         serialises builders across processes

`<id>` is a hash of the recipe (package list, suite, user, build-script version), so an
unchanged recipe is never rebuilt. A task's setup script makes a *layer*: the base tree copied,
the script run in it as root under bubblewrap (no network), cached by hash of (base id, script).
Docker sees every image as `agentrl-task:<id>`, imported from the tree on first use.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import hashlib
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from envs.sandbox import apt_sources
from envs.sandbox.base import SandboxError, passwd_entry

BUILD_SCRIPT_VERSION = 2  # bump when the build steps below change what lands in the tree
LAYER_VERSION = 1
DOCKER_REPO = "agentrl-task"

DEFAULT_PACKAGES = (
  "bash", "coreutils", "findutils", "grep", "sed", "gawk", "diffutils", "patch", "tar",
  "gzip", "xz-utils", "procps", "less", "file", "bc", "jq", "sqlite3", "make", "git",
  "python3", "python-is-python3", "python3-pytest",
)  # fmt: skip

_DPKG_EXCLUDES = ("man", "doc", "info", "locale", "lintian", "linda")


@dataclasses.dataclass(frozen=True)
class ImageRecipe:
  """What goes into a task root filesystem."""

  packages: tuple[str, ...] = DEFAULT_PACKAGES
  suite: str | None = None  # None: the host's release codename
  variant: str = "minbase"
  user: str = "agent"
  uid: int = 1000
  dirs: tuple[str, ...] = ("/workspace",)  # created empty (mount points for the sandboxes)

  def resolved(self) -> ImageRecipe:
    suite = self.suite or apt_sources.host_codename()
    return dataclasses.replace(self, suite=suite, packages=tuple(sorted(set(self.packages))))


def cache_root() -> pathlib.Path:
  """$AGENTRL_CACHE/images; default ~/.cache/agentrl/images, or /var/cache/agentrl/images for
  root (bubblewrap runs as an unprivileged uid that must traverse it, and ~root is 0700)."""
  base = os.environ.get("AGENTRL_CACHE")
  if not base and os.geteuid() == 0:
    base = "/var/cache/agentrl"
  base = base or os.path.join(os.path.expanduser("~"), ".cache", "agentrl")
  return pathlib.Path(base, "images")


@functools.lru_cache(maxsize=64)
def check_traversable(path: pathlib.Path) -> None:
  """Raises unless every folder above `path` is searchable by other users."""
  for p in [path, *path.parents]:
    if not os.stat(p).st_mode & 0o001:
      raise SandboxError(
        f"{p} is not searchable by other users, but the unprivileged sandbox uid must reach "
        f"{path}: point AGENTRL_CACHE at a folder others can traverse (or chmod o+x {p})"
      )


def recipe_id(recipe: ImageRecipe) -> str:
  r = recipe.resolved()
  blob = json.dumps({"recipe": dataclasses.asdict(r), "v": BUILD_SCRIPT_VERSION}, sort_keys=True)
  return "r" + hashlib.sha256(blob.encode()).hexdigest()[:15]


def layer_id(base_id: str, script: str) -> str:
  blob = json.dumps({"base": base_id, "script": script, "v": LAYER_VERSION})
  return "l" + hashlib.sha256(blob.encode()).hexdigest()[:15]


@dataclasses.dataclass(frozen=True)
class Image:
  """A built image in the cache."""

  id: str
  dir: pathlib.Path

  @property
  def tar_path(self) -> pathlib.Path:
    return self.dir / "rootfs.tar"

  @property
  def rootfs(self) -> pathlib.Path:
    return self.dir / "rootfs"

  @property
  def docker_tag(self) -> str:
    return f"{DOCKER_REPO}:{self.id}"

  @property
  def meta(self) -> dict:
    return json.loads((self.dir / "meta.json").read_text())

  def user(self, name: str) -> tuple[int, int, str]:
    """(uid, gid, home) of `name` from the image's /etc/passwd."""
    return _passwd_entry(self.rootfs / "etc/passwd", name)


@functools.lru_cache(maxsize=256)
def _passwd_entry(passwd: pathlib.Path, name: str) -> tuple[int, int, str]:
  f = passwd_entry(passwd.read_bytes(), name)
  if f is None:
    raise SandboxError(f"{passwd}: no user {name!r}")
  return int(f[2]), int(f[3]), f[5]


class Lock:
  """An exclusive flock on `<cache>/<id>.lock`, so concurrent builders do the work once."""

  def __init__(self, path: pathlib.Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    self._f = open(path, "a+")  # noqa: SIM115

  def __enter__(self):
    fcntl.flock(self._f, fcntl.LOCK_EX)
    return self

  def __exit__(self, *exc):
    fcntl.flock(self._f, fcntl.LOCK_UN)
    self._f.close()


def _log(msg: str) -> None:
  print(f"[build_image] {msg}", file=sys.stderr, flush=True)


def _mmdebstrap_cmd(r: ImageRecipe, out_tar: pathlib.Path, sources_file: pathlib.Path) -> list[str]:
  hooks = [
    f'chroot "$1" useradd --create-home --uid {r.uid} --user-group --shell /bin/bash {r.user}',
    'printf "127.0.0.1 localhost sandbox\\n::1 localhost\\n" > "$1/etc/hosts"',
    'rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*.log',
  ]
  hooks += [f'mkdir -p "$1{d}" && chmod 0755 "$1{d}"' for d in r.dirs]
  # Every exec is `bash -lc`: spare /etc/profile a fork+exec of `id` each time.
  hooks.append('sed -i \'s/"$(id -u)"/"${EUID:-$(id -u)}"/\' "$1/etc/profile"')
  cmd = ["mmdebstrap", f"--variant={r.variant}", "--include=" + ",".join(r.packages)]
  for d in _DPKG_EXCLUDES:
    cmd.append(f"--dpkgopt=path-exclude=/usr/share/{d}/*")
  cmd.append("--dpkgopt=path-include=/usr/share/doc/*/copyright")
  cmd += [f"--aptopt={o}" for o in apt_sources.forwarded_apt_options()]
  cmd += [f"--customize-hook={h}" for h in hooks]
  cmd += ["--format=tar", str(r.suite), str(out_tar), str(sources_file)]
  return cmd


def _run_logged(cmd: list[str], what: str) -> None:
  t0 = time.monotonic()
  p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  if p.returncode != 0:
    raise SandboxError(f"{what} failed (exit {p.returncode}):\n{p.stdout[-6000:]}")
  _log(f"{what}: done in {time.monotonic() - t0:.1f}s")


def _extract(tar: pathlib.Path, dest: pathlib.Path) -> None:
  """Extracts a root filesystem tarball (as root: owners kept; else owned by the caller)."""
  tmp = dest.with_name(dest.name + ".tmp")
  shutil.rmtree(tmp, ignore_errors=True)
  tmp.mkdir(parents=True)
  own = ["--same-owner", "--numeric-owner"] if os.geteuid() == 0 else ["--no-same-owner"]
  _run_logged(["tar", "-xpf", str(tar), "-C", str(tmp), *own], f"extract {tar.name}")
  os.replace(tmp, dest)


def build(recipe: ImageRecipe | None = None, force: bool = False) -> Image:
  """Builds (or reuses) the image for `recipe`; returns it with its rootfs extracted."""
  r = (recipe or ImageRecipe()).resolved()
  iid = recipe_id(r)
  img = Image(iid, cache_root() / iid)
  with Lock(cache_root() / f"{iid}.lock"):
    if force:
      shutil.rmtree(img.dir, ignore_errors=True)
    if (img.dir / "meta.json").exists() and img.tar_path.exists():
      _log(f"image {iid} cached at {img.dir}")
    else:
      _build_base(r, img)
    if not img.rootfs.is_dir():
      _extract(img.tar_path, img.rootfs)
  return img


def _build_base(r: ImageRecipe, img: Image) -> None:
  if shutil.which("mmdebstrap") is None:
    raise SandboxError("mmdebstrap is not installed (apt-get install mmdebstrap)")
  shutil.rmtree(img.dir, ignore_errors=True)
  img.dir.mkdir(parents=True)
  with tempfile.TemporaryDirectory(prefix="agentrl-apt-") as tmp:
    sources = apt_sources.write_sources(pathlib.Path(tmp), str(r.suite))
    part = img.dir / "rootfs.tar.part"
    _log(f"building image {img.id} ({len(r.packages)} packages, suite {r.suite}) with mmdebstrap")
    _run_logged(_mmdebstrap_cmd(r, part, sources), "mmdebstrap")
    used = sources.read_text()
  os.replace(part, img.tar_path)
  meta = {"id": img.id, "recipe": dataclasses.asdict(r), "sources": used, "built": time.time()}
  (img.dir / "meta.json").write_text(json.dumps(meta, indent=1))


def find(image_id: str) -> Image:
  """A built image by id; SandboxError (with the command to build it) when missing."""
  img = Image(image_id, cache_root() / image_id)
  if not (img.dir / "meta.json").exists():
    raise SandboxError(
      f"image {image_id!r} is not built in {cache_root()}: run `python -m launch.build_image`"
    )
  return img


@functools.lru_cache(maxsize=1)
def default_id() -> str:
  return recipe_id(ImageRecipe())


def resolve(name: str) -> Image:
  """'default' (the default recipe) or an image id."""
  return find(default_id() if name == "default" else name)


def ensure_rootfs(img: Image, workdirs: tuple[str, ...] = ()) -> pathlib.Path:
  """The image's extracted tree (extracting it if needed), with `workdirs` present."""
  if not img.rootfs.is_dir():
    with Lock(cache_root() / f"{img.id}.lock"):
      if not img.rootfs.is_dir():
        _extract(img.tar_path, img.rootfs)
  for d in workdirs:  # bubblewrap needs an existing mount point in the read-only tree
    p = img.rootfs / d.lstrip("/")
    if not p.is_dir():
      p.mkdir(parents=True, exist_ok=True)
  return img.rootfs


def with_setup(base: Image, script: str, runner: Callable[[pathlib.Path, str], None]) -> Image:
  """The layer `base` + `script` (built once with `runner(tree, script)`, then cached)."""
  lid = layer_id(base.id, script)
  img = Image(lid, cache_root() / lid)
  if (img.dir / "meta.json").exists() and img.rootfs.is_dir():
    return img
  with Lock(cache_root() / f"{lid}.lock"):
    if (img.dir / "meta.json").exists() and img.rootfs.is_dir():
      return img
    ensure_rootfs(base)
    shutil.rmtree(img.dir, ignore_errors=True)
    img.dir.mkdir(parents=True)
    tree = img.dir / "rootfs.tmp"
    _run_logged(["cp", "-a", "--reflink=auto", str(base.rootfs), str(tree)], f"copy {base.id}")
    runner(tree, script)
    os.replace(tree, img.rootfs)
    meta = {"id": lid, "base": base.id, "script": script, "built": time.time()}
    (img.dir / "meta.json").write_text(json.dumps(meta, indent=1))
  return img


def ensure_docker(img: Image, client) -> str:
  """Imports the image into the Docker daemon (once); returns its tag."""
  import docker.errors  # noqa: PLC0415 (optional dependency of this module)

  try:
    client.images.get(img.docker_tag)
    return img.docker_tag
  except docker.errors.ImageNotFound:
    pass
  with Lock(cache_root() / f"{img.id}.docker.lock"):
    try:
      client.images.get(img.docker_tag)
      return img.docker_tag
    except docker.errors.ImageNotFound:
      pass
    t0 = time.monotonic()
    src = img.tar_path if img.tar_path.exists() else _tar_tree(img)
    changes = [f"LABEL agentrl.image={img.id}"]
    client.api.import_image_from_file(str(src), repository=DOCKER_REPO, tag=img.id, changes=changes)
    _log(f"docker import {img.docker_tag}: done in {time.monotonic() - t0:.1f}s")
  return img.docker_tag


def _tar_tree(img: Image) -> pathlib.Path:
  """Packs a layer's tree into rootfs.tar (layers are built as trees)."""
  part = img.dir / "rootfs.tar.part"
  own = ["--numeric-owner"]
  _run_logged(["tar", "-cf", str(part), "-C", str(img.rootfs), *own, "."], f"pack {img.id}")
  os.replace(part, img.tar_path)
  return img.tar_path


def prune(keep: Image, client=None) -> list[str]:
  """Deletes cached images (trees and Docker tags) other than `keep` and layers built on it."""
  removed = []
  for d in sorted(cache_root().iterdir()) if cache_root().is_dir() else []:
    if not d.is_dir() or d.name == keep.id:
      continue
    meta = d / "meta.json"
    base = json.loads(meta.read_text()).get("base") if meta.exists() else None
    if base == keep.id:
      continue
    with Lock(cache_root() / f"{d.name}.lock"):
      shutil.rmtree(d, ignore_errors=True)
    for lock in (f"{d.name}.lock", f"{d.name}.docker.lock"):
      (cache_root() / lock).unlink(missing_ok=True)
    removed.append(d.name)
  if client is not None:
    for img in client.images.list(name=DOCKER_REPO):
      for tag in img.tags:
        iid = tag.split(":", 1)[1]
        if iid != keep.id and not (cache_root() / iid).is_dir():
          client.images.remove(tag)
          removed.append(tag)
  return removed
