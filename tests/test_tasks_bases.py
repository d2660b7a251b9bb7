"""Base images of task Dockerfiles: language images map onto the base image plus their
toolchain's distribution packages (the pattern of Harbor tasks built FROM gcc, golang or
eclipse-temurin). Pure tests: no sandbox."""

import pytest

from envs import dockerfile


@pytest.mark.parametrize(
  "base, apt, env_key",
  [
    ("gcc:13.3.0-bookworm", ("gcc", "g++", "make"), None),
    ("golang:1.22.7-bookworm", ("golang-go",), "GOPATH"),
    ("eclipse-temurin:17.0.12_7-jdk-jammy", ("openjdk-17-jdk-headless",), "JAVA_HOME"),
    ("openjdk:17-slim", ("openjdk-17-jdk-headless",), "JAVA_HOME"),
    ("maven:3.9-eclipse-temurin-17", ("maven", "openjdk-17-jdk-headless"), "JAVA_HOME"),
    ("node:20-bookworm", ("nodejs", "npm"), None),
    ("rust:1.79", ("rustc", "cargo"), None),
  ],
)
def test_language_image_adds_its_toolchain(base, apt, env_key):
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
