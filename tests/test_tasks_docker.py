"""A sample of built-in tasks passes the whole quality gate on the Docker backend.

Seven tasks, one of each domain, one Docker container per task reused through
snapshot/restore; the verifier is the same as on bwrap. Needs a running Docker daemon.
"""

import pytest

from envs.agents.scripted import OracleAgent
from envs.grading.hacks import HACKS
from envs.grading.quality import GateConfig, check_tasks
from envs.grading.verifier import Verifier, VerifierConfig
from envs.task import BUILTIN_DIR, load_task
from envs.task_env import open_task_sandbox

pytestmark = pytest.mark.docker

SAMPLE = (
  "fo-permissions",
  "tx-word-freq",
  "py-parse-date",
  "da-sqlite-query",
  "gi-merge-conflict",
  "sy-service-script",
  "bu-make-deps",
)


def test_sample_passes_the_gate_on_docker():
  tasks = [load_task(BUILTIN_DIR / "core" / name, "core") for name in SAMPLE]
  assert len({t.domain for t in tasks}) == 7
  reports = check_tasks(tasks, GateConfig(backend="docker", k=1, concurrency=2))
  failed = {r.task_id: r.infra_error or r.reasons for r in reports if not r.ok}
  assert not failed, failed
  assert all(len(r.runs) == 1 + 1 + len(HACKS) for r in reports)  # oracle, no-op, hacks


def test_fresh_mode_on_docker():
  task = load_task(BUILTIN_DIR / "core" / "gi-cherry-pick", "core")
  with open_task_sandbox(task, "docker", snapshot=True) as ts:
    OracleAgent().run(ts.sandbox, task)
    res = Verifier(VerifierConfig(mode="fresh", fresh_reuse_pristine=False)).grade(ts)
  assert res.passed and res.failure_mode == "none", res.detail
