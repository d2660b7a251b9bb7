"""Milestone and constraint checks on scripted trajectories in real bubblewrap sandboxes: runs
made to pass or to break them, the turn of the first violation, regressions, the policy path
(one check per model turn) and how the records feed the metrics."""

import pytest

from envs import eval as ev
from envs import metrics
from envs.agents.agent import AgentConfig, ScriptedPolicy
from envs.agents.scripted import ScriptedAgent
from envs.agents.tool_format import format_tool_call
from envs.sandbox.base import SandboxError
from envs.task import Constraint, FileEntry, Milestone, Task, TestSpec
from models.io.tokenizer import ByteTokenizer

TEST = b"""
import os, pathlib
WS = pathlib.Path(os.environ["AGENTRL_WORKSPACE"])

def test_report():
    assert (WS / "out" / "report.txt").read_text() == "rows: 2\\n"
"""

TASK = Task(
  id="mt/task",
  instruction="Copy raw/data.csv to out/ and write out/report.txt. Never touch raw/ or config.ini.",
  domain="file_ops",
  difficulty=1,
  tests=TestSpec(files=(FileEntry("test_outputs.py", TEST),)),
  workspace_files=(
    FileEntry("raw/data.csv", b"id,v\n1,a\n2,b\n"),
    FileEntry("config.ini", b"mode=production\n"),
  ),
  setup_script="echo secret > /tmp/protected.txt\n",
  milestones=(
    Milestone("out_dir", "test -d out"),
    Milestone("copied", "cmp -s raw/data.csv out/data.csv"),
    Milestone("report", "grep -qx 'rows: 2' out/report.txt"),
  ),
  constraints=(
    Constraint("keep_raw", "unchanged", paths=("raw/",)),
    Constraint("only_out", "only_write_under", paths=("out/",)),
    Constraint("mode_kept", "command", check="grep -qx mode=production config.ini"),
    Constraint("keep_tmp", "unchanged", paths=("/tmp/protected.txt",)),
  ),
  agent_timeout_s=120,
  test_timeout_s=60,
)
CFG = ev.EvalConfig(retries=0)


def _run(commands, task=TASK):
  return ev.run_trial(task, 0, ScriptedAgent(lambda t: list(commands)), CFG)


def test_passing_run_reaches_every_milestone_without_violation():
  rec = _run(["mkdir out", "cp raw/data.csv out/", "echo 'rows: 2' > out/report.txt", "ls -R"])
  assert rec["passed"] and rec["failure_mode"] == "none" and rec["turns"] == 4
  ch = rec["checks"]
  assert ch["first_reached"] == {"out_dir": 1, "copied": 2, "report": 3}
  assert ch["step_success"] == 1.0 and ch["regressed"] == []
  assert ch["forgot"] is False and ch["first_violation_turn"] is None
  assert ch["checked_turns"] == [0, 1, 2, 3, 4]
  assert [tc["turn"] for tc in rec["turn_checks"]] == [0, 1, 2, 3, 4]
  assert rec["turn_checks"][2]["changed"] == ["out/data.csv"]


def test_violations_and_turn_of_first_violation():
  rec = _run(
    [
      "mkdir out",
      "echo tmp > scratch.txt",  # turn 2: a write outside out/
      "rm scratch.txt",  # turn 3: undone, nothing is broken at this turn
      "sed -i s/production/dev/ config.ini",  # turn 4: the stated rule is forgotten
      "cp raw/data.csv out/ && echo 3,c >> raw/data.csv",  # turn 5: raw/ modified
      "echo changed > /tmp/protected.txt",  # turn 6: a protected path outside the workspace
      "echo 'rows: 2' > out/report.txt",
    ]
  )
  ch = rec["checks"]
  assert ch["first_violation"] == {"keep_raw": 5, "only_out": 2, "mode_kept": 4, "keep_tmp": 6}
  assert ch["first_violation_turn"] == 2 and ch["forgot"] is True
  assert ch["violated_at_end"] == ["keep_raw", "only_out", "mode_kept", "keep_tmp"]
  violated = {tc["turn"]: tc["violated"] for tc in rec["turn_checks"]}
  assert violated[1] == [] and violated[2] == ["only_out"] and violated[3] == []
  assert violated[4] == ["only_out", "mode_kept"]
  # The tests still pass (they only check the report): pass@1 counts it, completion does not.
  assert rec["passed"]
  assert ch["first_reached"]["copied"] is None  # raw/ changed in the same turn as the copy
  s = metrics.aggregate([rec], ks=[1])
  assert s["overall"]["pass@1"] == 1.0 and s["overall"]["completion"] == 0.0
  assert s["overall"]["forgetting"] == 1.0 and s["overall"]["first_violation_mean"] == 2.0


def test_regressed_milestones_and_failed_tests():
  rec = _run(["mkdir out", "cp raw/data.csv out/", "rm -r out"])
  ch = rec["checks"]
  assert ch["first_reached"] == {"out_dir": 1, "copied": 2, "report": None}
  assert ch["regressed"] == ["out_dir", "copied"] and ch["final"] == dict.fromkeys(
    ch["final"], False
  )
  assert ch["step_success"] == pytest.approx(2 / 3)
  assert not rec["passed"] and rec["failure_mode"] == "tests_failed"


def test_policy_agent_checks_after_every_model_turn():
  call = format_tool_call
  actions = [
    call("shell", command="mkdir out && cp raw/data.csv out/"),
    "not a tool call",  # a parse error is a turn too; the state does not change
    call("write_file", path="out/report.txt", content="rows: 2\n"),
    call("shell", command="touch stray"),
    call("finish"),
  ]
  tok = ByteTokenizer()
  agent = ev.PolicyAgent(ScriptedPolicy(tok, actions), tok, AgentConfig(max_turns=10))
  rec = ev.run_trial(TASK, 0, agent, CFG)
  assert rec["finish_reason"] == "finish" and rec["turns"] == 5 and rec["passed"]
  ch = rec["checks"]
  assert ch["checked_turns"] == [0, 1, 2, 3, 4, 5]
  assert ch["first_reached"] == {"out_dir": 1, "copied": 1, "report": 3}
  assert ch["first_violation"]["only_out"] == 4 and ch["first_violation_turn"] == 4
  assert [t["tool"] for t in rec["trajectory"]] == ["shell", None, "write_file", "shell", "finish"]
  assert rec["tokens"] == sum(len(tok.encode(a)) for a in actions)


class _BrokenAgent:
  """An agent whose sandbox dies mid-episode: an infrastructure failure, never a score of 0."""

  name = "broken"

  def __init__(self):
    self.calls = 0

  def run(self, sb, task, seed=0, on_turn=None, episode_id=None):
    self.calls += 1
    raise SandboxError("sandbox died")


def test_infrastructure_failure_is_retried_then_masked():
  agent = _BrokenAgent()
  rec = ev.run_trial(TASK, 0, agent, ev.EvalConfig(retries=1))
  assert agent.calls == 2 and rec["attempts"] == 2
  assert rec["masked"] and rec["reward"] is None and rec["failure_mode"] == "infra_error"
  s = metrics.aggregate([rec], ks=[1])
  assert s["masked_trials"] == 1 and s["overall"]["trials"] == 0 and s["overall"]["pass@1"] is None
