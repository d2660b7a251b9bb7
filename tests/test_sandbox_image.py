"""The task image: apt sources from the machine's config, content-hash caching, layers, CLI."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from envs.sandbox import apt_sources, testing
from envs.sandbox import image as image_lib

sandbox_image = testing.sandbox_image  # fixture
REPO = pathlib.Path(__file__).resolve().parents[1]


def _machine_uri() -> str:
  """A mirror URI from this machine's own apt config (never a hard-coded host)."""
  for stanza in apt_sources.stanzas_for(apt_sources.host_codename()):
    for line in stanza.splitlines():
      if line.startswith("URIs:"):
        return line.split()[1].rstrip("/")
  pytest.skip("this machine has no apt sources to build the parser fixture from")


def test_apt_sources_from_machine_config(tmp_path):
  uri = _machine_uri()
  main, sec, other, off = uri, f"{uri}-security", f"{uri}-other", f"{uri}-off"
  one_line = (
    "# a comment\n"
    f"deb [arch=amd64 signed-by=KEYRING.gpg] {main} bookworm main contrib\n"
    f"deb {main} bookworm-updates main\n"
    f"deb-src {main} bookworm main\n"
    f"deb {main} trixie main\n"
  )
  deb822 = (
    f"Types: deb\nURIs: {sec}\nSuites: bookworm-security\nComponents: main\nSigned-By:\n"
    " -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n abc\n -----END PGP PUBLIC KEY BLOCK-----\n\n"
    f"Types: deb\nURIs: {other}\nSuites: nodistro\nComponents: main\n\n"
    f"Types: deb\nURIs: {off}\nSuites: bookworm\nComponents: main\nEnabled: no\n"
  )
  (tmp_path / "sources.list.d").mkdir()
  (tmp_path / "sources.list").write_text(one_line)
  (tmp_path / "sources.list.d" / "a.sources").write_text(deb822)
  (tmp_path / "sources.list.d" / "b.list.disabled").write_text(f"deb {off} bookworm main\n")
  got = apt_sources.stanzas_for("bookworm", tmp_path)
  assert got == [
    f"Types: deb\nURIs: {main}\nSuites: bookworm\nComponents: main contrib\n"
    "Architectures: amd64\nSigned-By: KEYRING.gpg",
    f"Types: deb\nURIs: {main}\nSuites: bookworm-updates\nComponents: main",
    f"Types: deb\nSuites: bookworm-security\nURIs: {sec}\n"
    "Components: main\nSigned-By: \n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n abc\n"
    " -----END PGP PUBLIC KEY BLOCK-----",
  ]
  assert apt_sources.stanzas_for("noble", tmp_path) == []


def test_recipe_hash():
  base = image_lib.ImageRecipe()
  assert image_lib.recipe_id(base) == image_lib.recipe_id(base)
  shuffled = image_lib.ImageRecipe(packages=tuple(reversed(base.packages)) + ("bash",))
  assert image_lib.recipe_id(shuffled) == image_lib.recipe_id(base)  # order and dups ignored
  more = image_lib.ImageRecipe(packages=base.packages + ("curl",))
  assert image_lib.recipe_id(more) != image_lib.recipe_id(base)
  assert base.resolved().suite == apt_sources.host_codename()
  assert image_lib.layer_id("r1", "echo a") != image_lib.layer_id("r1", "echo b")


def test_mmdebstrap_uses_only_the_machine_sources(tmp_path):
  r = image_lib.ImageRecipe().resolved()
  cmd = image_lib._mmdebstrap_cmd(r, tmp_path / "o.tar", tmp_path / "agentrl.sources")
  assert cmd[-1] == str(tmp_path / "agentrl.sources")  # the only mirror argument
  assert not [a for a in cmd if "://" in a]
  assert "--variant=minbase" in cmd and any("python3-pytest" in a for a in cmd)


def test_build_reuses_the_cache(sandbox_image):
  mtime = sandbox_image.tar_path.stat().st_mtime_ns
  again = image_lib.build()
  assert again == sandbox_image and again.tar_path.stat().st_mtime_ns == mtime
  assert image_lib.resolve("default") == sandbox_image
  meta = sandbox_image.meta
  assert meta["recipe"]["suite"] == apt_sources.host_codename() and "URIs:" in meta["sources"]
  assert (sandbox_image.rootfs / "usr/bin/python").exists()
  assert sandbox_image.user("agent") == (1000, 1000, "/home/agent")
  with pytest.raises(image_lib.SandboxError, match="build_image"):
    image_lib.resolve("r000000000000000")


def test_setup_layer_is_built_once(sandbox_image):
  from envs.sandbox.bwrap_host import run_setup_script

  calls = []

  def runner(tree, script):
    calls.append(script)
    run_setup_script(tree, script)

  script = "echo layer-test > /etc/agentrl-layer-test"
  a = image_lib.with_setup(sandbox_image, script, runner)
  b = image_lib.with_setup(sandbox_image, script, runner)
  assert a == b and len(calls) <= 1  # built at most once (maybe by an earlier run)
  assert (a.rootfs / "etc/agentrl-layer-test").read_text() == "layer-test\n"
  assert not (sandbox_image.rootfs / "etc/agentrl-layer-test").exists()  # base untouched
  assert a.user("agent") == sandbox_image.user("agent")


def test_cli_reuses_and_skips_an_unreachable_docker(sandbox_image):
  env = dict(os.environ, DOCKER_HOST="unix:///nonexistent/docker.sock")
  p = subprocess.run(
    [sys.executable, "-m", "launch.build_image"],
    cwd=REPO,
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert p.returncode == 0, p.stderr
  assert "skipping docker" in p.stdout
  assert p.stdout.strip().splitlines()[-1] == sandbox_image.id


def _cli(env, *args):
  cmd = [sys.executable, "-m", "launch.build_image", "--backends=bwrap", *args]
  return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def test_cli_prune_and_extra_packages(sandbox_image, tmp_path):
  # a cache of its own: the real image (linked in), a stale image, and a layer on the real one
  images = tmp_path / "images"
  images.mkdir()
  (images / sandbox_image.id).symlink_to(sandbox_image.dir)
  for name, base in (("r0000000000stale", None), ("l0000000000layer", sandbox_image.id)):
    (images / name).mkdir()
    (images / name / "meta.json").write_text(json.dumps({"base": base}))
  env = dict(os.environ, AGENTRL_CACHE=str(tmp_path))
  p = _cli(env, "--prune", "--extra_packages=bash")  # a package the default list holds
  assert p.returncode == 0, p.stderr
  assert p.stdout.strip().splitlines()[-1] == sandbox_image.id  # same recipe: the cached image
  assert "pruned: ['r0000000000stale']" in p.stdout
  assert sorted(d.name for d in images.iterdir() if d.is_dir()) == sorted(
    [sandbox_image.id, "l0000000000layer"]
  )
  assert sandbox_image.tar_path.exists()  # the kept image is untouched
  # a package the default list lacks is a new recipe: a new image to build (no mmdebstrap on
  # PATH here, so the build stops at once with its message)
  p = _cli(dict(env, PATH=str(tmp_path / "no-bin")), "--extra_packages=curl")
  assert p.returncode != 0 and "mmdebstrap is not installed" in p.stderr, p.stderr[-2000:]
  new = image_lib.recipe_id(image_lib.ImageRecipe(packages=image_lib.DEFAULT_PACKAGES + ("curl",)))
  assert new != sandbox_image.id and (images / f"{new}.lock").exists()
