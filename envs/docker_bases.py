"""The base images task Dockerfiles build on: which ones map onto the project's base image, and
the WORKDIR / ENV of public bases that task Dockerfiles inherit without repeating them."""

from __future__ import annotations

from envs.dockerfile_syntax import DockerfileError

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BASE_NAMES = ("debian", "ubuntu", "python", "buildpack-deps")
# WORKDIR / ENV of public base images that task Dockerfiles build on without repeating them.
KNOWN_BASES: tuple[tuple[str, str | None, tuple[tuple[str, str], ...]], ...] = (
  ("ghcr.io/laude-institute/t-bench/", "/app", ()),
  ("python:", None, (("LANG", "C.UTF-8"),)),
)


def map_base(image: str, file: str, line: int, text: str) -> str:
  """The image itself when it is Debian-like; `DockerfileError` otherwise."""
  name = image.split("/")[-1].split("@")[0]
  repo, _, tag = name.partition(":")
  ok = repo in BASE_NAMES or any(repo.startswith(b + "-") for b in BASE_NAMES)
  if not ok or "alpine" in tag or "windows" in tag:
    raise DockerfileError(
      file,
      line,
      text,
      f"base image {image!r} is not Debian, Ubuntu or python-slim; it cannot be mapped onto the base image",
    )
  return image
