r"""Build (or reuse, by content hash) the sandbox task root filesystem for both backends.

  python -m launch.build_image                       # default image: bwrap tree + docker import
  python -m launch.build_image --backends=bwrap      # no Docker
  python -m launch.build_image --extra_packages=gcc,curl --setup_script=setup.sh
  python -m launch.build_image --force               # rebuild even if cached
  python -m launch.build_image --prune               # and delete other cached images

Uses mmdebstrap with the machine's configured apt sources. Cached under
$AGENTRL_CACHE/images (default ~/.cache/agentrl/images); a second run takes about a second.
Docker is skipped with a message when no daemon is reachable. Prints the image id last.
"""

from __future__ import annotations

import pathlib
import time

from absl import flags

from envs.sandbox import image as image_lib
from launch.cli import LaunchError

_BACKENDS = flags.DEFINE_list("backends", ["bwrap", "docker"], "Backends to prepare the image for.")
_EXTRA = flags.DEFINE_list("extra_packages", [], "Packages added to the default package list.")
_SETUP = flags.DEFINE_string("setup_script", None, "Shell script run as root on top (a layer).")
_FORCE = flags.DEFINE_bool("force", False, "Rebuild the base image even when cached.")
_PRUNE = flags.DEFINE_bool("prune", False, "Delete other cached images (trees, Docker tags).")


def _docker_client():
  try:
    import docker  # noqa: PLC0415

    client = docker.from_env(timeout=30)
    client.ping()
    return client
  except Exception as e:  # noqa: BLE001 (any failure means: no usable daemon)
    print(f"[build_image] docker: no reachable daemon ({type(e).__name__}: {e}); skipping docker")
    return None


def main(argv):
  del argv
  unknown = [b for b in _BACKENDS.value if b not in ("bwrap", "docker")]
  if unknown:
    raise LaunchError(f"--backends: {', '.join(map(repr, unknown))} is not one of bwrap, docker")
  t0 = time.monotonic()
  packages = image_lib.DEFAULT_PACKAGES + tuple(p for p in _EXTRA.value if p)
  img = base = image_lib.build(image_lib.ImageRecipe(packages=packages), force=_FORCE.value)
  if _SETUP.value:
    from envs.sandbox import bwrap_host  # noqa: PLC0415

    script = pathlib.Path(_SETUP.value).read_text()
    img = image_lib.with_setup(img, script, bwrap_host.run_setup_script)
  print(f"[build_image] bwrap tree: {img.rootfs}")
  client = _docker_client() if "docker" in _BACKENDS.value else None
  if client is not None:
    print(f"[build_image] docker image: {image_lib.ensure_docker(img, client)}")
  if _PRUNE.value:
    print(f"[build_image] pruned: {image_lib.prune(base, client) or 'nothing'}")
  print(f"[build_image] ready in {time.monotonic() - t0:.1f}s")
  print(img.id)
  return 0


if __name__ == "__main__":
  from launch import cli

  cli.run(main)
