"""Base images of task Dockerfiles: language images map onto the base image plus their
toolchain's distribution packages (the pattern of Harbor tasks built FROM gcc, golang or
eclipse-temurin). Pure tests: no sandbox."""

import pytest

from envs.formats import docker_bases, dockerfile

FULL, SCM = docker_bases.BUILDPACK_FULL, docker_bases.BUILDPACK_SCM


@pytest.mark.parametrize(
  "base, apt, env_key",
  [  # gcc, node and rust are built on buildpack-deps (full), golang on its -scm layer
    ("gcc:13.3.0-bookworm", FULL, None),
    ("golang:1.22.7-bookworm", SCM + ("golang-go",), "GOPATH"),
    ("eclipse-temurin:17.0.12_7-jdk-jammy", ("openjdk-17-jdk-headless",), "JAVA_HOME"),
    ("openjdk:17-slim", ("openjdk-17-jdk-headless",), "JAVA_HOME"),
    ("maven:3.9-eclipse-temurin-17", ("maven", "openjdk-17-jdk-headless"), "JAVA_HOME"),
    ("node:20-bookworm", FULL + ("nodejs", "npm"), None),
    ("node:20-slim", ("nodejs", "npm"), None),
    ("rust:1.79", FULL + ("rustc", "cargo"), None),
    ("buildpack-deps:jammy", FULL, None),
    ("buildpack-deps:bookworm-curl", docker_bases.BUILDPACK_CURL, None),
  ],
)
def test_language_image_adds_its_toolchain(base, apt, env_key):
  """A task's reference solution may need what the image's layers bring (an aider-polyglot
  task FROM buildpack-deps:jammy decrypts its solution with openssl)."""
  plan = dockerfile.translate(f"FROM {base}\nWORKDIR /app\nRUN apt-get install -y jq\n")
  assert plan.base == base and plan.workdir == "/app"
  assert plan.apt_packages == apt + ("jq",)
  # the replayed FROM checks the toolchain is in the package layer, naming line 1
  assert f"agentrl_apt 1 {' '.join(apt)}" in plan.setup_script
  assert any(base in w and "version may differ" in w for w in plan.warnings)
  if env_key:
    assert env_key in dict(plan.env)


def test_java_home_follows_the_tag_major_version():
  plan = dockerfile.translate("FROM eclipse-temurin:21-jdk\n")
  assert plan.apt_packages == ("openjdk-21-jdk-headless",)
  assert "/java-21-openjdk-" in dict(plan.env)["JAVA_HOME"]


def test_golang_path_keeps_later_env_expansion():
  plan = dockerfile.translate("FROM golang:1.22\nENV PATH=/opt/tool/bin:$PATH\n")
  path = dict(plan.env)["PATH"].split(":")
  assert path[:2] == ["/opt/tool/bin", "/go/bin"] and "/usr/bin" in path


@pytest.mark.parametrize("base", ["node:20-alpine", "eclipse-temurin:17-ubi9-minimal", "haskell:9"])
def test_non_debian_language_images_still_fail(base):
  with pytest.raises(dockerfile.DockerfileError, match="not Debian"):
    dockerfile.translate(f"FROM {base}\n")


def test_pip_option_values_are_not_packages():
  plan = dockerfile.translate(
    "FROM python:3.12-slim\nRUN pip install --no-cache-dir --retries 3 --timeout 60 "
    "--progress-bar off pytest==8.4.1 pytest-json-ctrf==0.3.5\n"
  )
  assert plan.pip_packages == ("pip", "pytest==8.4.1", "pytest-json-ctrf==0.3.5")


@pytest.mark.parametrize(
  "base,pip",
  [("python:3.13-slim", True), ("ghcr.io/laude-institute/t-bench/python-3-13:20250620", True)]
  + [("debian:bookworm-slim", False), ("ubuntu:24.04", False), ("gcc:13", False)],
)
def test_python_images_bring_pip_and_no_marker(base, pip):
  """The official python images install pip for their own Python (no EXTERNALLY-MANAGED
  marker); Debian's and Ubuntu's python3 has no pip and keeps the marker, as in Docker."""
  plan = dockerfile.translate(f"FROM {base}\n")
  assert ("pip" in plan.pip_packages) == pip
  assert ("EXTERNALLY-MANAGED" in plan.setup_script) == pip


def test_placing_the_dropped_uv_binary_is_dropped_too():
  plan = dockerfile.translate(
    "FROM gcc:13.3.0-bookworm\nRUN curl -LsSf https://astral.sh/uv/0.5.11/install.sh | sh\n"
    "RUN cp /root/.local/bin/uv /root/.local/bin/uvx /usr/local/bin/ && echo kept\n"
    "RUN cp /opt/uvicorn.conf /etc/\n"
  )
  assert "bash -ec ': &&  echo kept'" in plan.setup_script
  assert "/opt/uvicorn.conf" in plan.setup_script  # only the uv binary itself
  assert any("uv binary dropped" in w for w in plan.warnings)


def test_test_script_install_line_with_redirections_and_semicolons():
  from envs.formats import test_script

  s = test_script.parse(
    "#!/bin/bash\napt-get update >/dev/null 2>&1; apt-get install -y curl >/dev/null 2>&1\n"
    "apt-get install -y jq >/dev/null 2>&1\nuvx --with pytest==8.4.1 pytest /tests -rA\n",
    "test.sh",
  )
  assert s.apt_packages == ("jq",) and s.runs_pytest


def test_an_added_apt_repository_is_dropped_and_its_packages_checked():
  """`add-apt-repository ppa:...` needs the network: dropped (with a warning), the packages
  it was for come from the machine's sources and are checked like any others."""
  plan = dockerfile.translate(
    "FROM buildpack-deps:jammy\nRUN apt-get update && apt-get install -y "
    "software-properties-common && add-apt-repository ppa:deadsnakes/ppa && apt-get update "
    "&& apt-get install -y python3.11 python3.11-venv\n"
  )
  assert plan.apt_packages[-2:] == ("python3.11", "python3.11-venv")
  steps = ": && agentrl_apt 2 software-properties-common && : && : && agentrl_apt 2 python3.11"
  assert f"bash -ec '{steps} python3.11-venv'" in (plan.setup_script)
  assert any("ppa:deadsnakes/ppa not added" in w for w in plan.warnings)


@pytest.mark.parametrize(
  "base, version",
  [("python:3.13-slim", "3.13"), ("python:3.8-slim-bookworm", "3.8")]
  + [("ghcr.io/laude-institute/t-bench/python-3-13:20250620", "3.13"), ("python:3", None)]
  + [("debian:bookworm-slim", None), ("ghcr.io/laude-institute/t-bench/ubuntu-24-04:1", None)],
)
def test_python_image_paths_are_links_to_the_replayed_python(base, version):
  """A python:3.X image's interpreter paths (/usr/local/bin/python3.X, pip3.X,
  /usr/local/lib/python3.X/site-packages) name the replayed Python's own, so a step that
  deletes `site-packages/pip` deletes the pip the tests use (tb1-dev broken-python)."""
  script = dockerfile.translate(f"FROM {base}\n").setup_script
  if version is None:
    assert "site-packages" not in script
    return
  site = f"/usr/local/lib/python{version}/site-packages"
  assert f"ln -s /usr/local/lib/python$v/dist-packages {site}" in script
  assert f"for p in python3 python{version}; do" in script
  assert f"ln -s pip3 /usr/local/bin/pip{version}" in script


def test_rm_of_a_system_path_runs_and_cache_clean_ups_are_dropped():
  """`RUN rm -rf /usr/local/lib/python3.13/site-packages/pip` removes it where the root is
  writable (it was dropped as a clean-up); `rm -rf /var/lib/apt/lists/*` is still dropped."""
  script = dockerfile.translate(
    "FROM python:3.13-slim\nRUN rm -rf /usr/local/lib/python3.13/site-packages/pip\n"
    "RUN apt-get install -y jq && rm -rf /var/lib/apt/lists/* ~/.cache/pip /var/cache/apt\n"
  ).setup_script
  assert "{ [ ! -w / ] || rm -rf /usr/local/lib/python3.13/site-packages/pip; }" in script
  assert "bash -ec 'agentrl_apt 3 jq && :'" in script
