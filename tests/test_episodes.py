"""The one episode runner (envs.episodes): one trajectory never aborts a run.

An unexpected exception inside one trial (a bug in an agent, a task file the set-up cannot
write) is that trial's infrastructure error, with its cause, and the eval suite, the quality
gate and the RL rollouts go on with the other trials. Real bwrap sandboxes throughout.
"""

import dataclasses

from envs import eval as ev
from envs import procedural
from envs.agents.scripted import NullAgent, OracleAgent
from envs.episodes import Episodes
from envs.grading.quality import GateConfig, check_tasks
from envs.task import FileEntry
from rl.config import RolloutConfig
from rl.runtime.buffer import StalenessBuffer
from rl.runtime.rollout import RolloutManager
from rl.runtime.trajectory_store import TrajectoryStore

GOOD = procedural.generate("echo_word", 0)
# set-up fails with a TypeError (not a SandboxError): no file content to write
UNWRITABLE = dataclasses.replace(
  GOOD, id="unwritable", workspace_files=(FileEntry("notes.txt", None, 0o644),)
)


class _BuggyAgent:
  """The oracle, but for one task, where it raises what no runner expects."""

  name = "buggy"

  def __init__(self, bad_id: str):
    self.bad_id, self.calls = bad_id, 0

  def run(self, sb, task, seed=0, on_turn=None, episode_id=None):
    if task.id == self.bad_id:
      self.calls += 1
      raise RuntimeError("agent bug")
    return OracleAgent().run(sb, task, seed, on_turn, episode_id)


def test_a_raising_agent_or_set_up_is_an_infra_error_of_that_episode():
  out = Episodes(_BuggyAgent(GOOD.id))(GOOD, "t-0", 0)
  assert out.infra_error and "RuntimeError: agent bug" in out.infra_error
  assert out.grade.masked and out.failure_mode == "infra_error" and out.reward == 0.0
  assert out.episode.finish_reason == "infra" and not out.passed
  out = Episodes(NullAgent())(UNWRITABLE, "t-1", 0)
  assert "TypeError" in out.infra_error and out.grade.masked


def test_a_trial_raising_inside_the_runner_is_an_infra_error_and_the_suite_goes_on():
  other = procedural.generate("echo_word", 1)
  agent = _BuggyAgent(other.id)
  trials = ev.evaluate([GOOD, other, UNWRITABLE], agent, ev.EvalConfig(retries=1))
  good, bad, unwritable = trials
  assert good["passed"] and not good["masked"], good["detail"]
  assert bad["masked"] and bad["failure_mode"] == "infra_error" and bad["attempts"] == 2
  assert "RuntimeError: agent bug" in bad["detail"] and agent.calls == 2
  assert unwritable["masked"] and "TypeError" in unwritable["detail"]


def test_a_task_raising_in_the_quality_gate_is_an_infra_error_and_the_gate_goes_on():
  reports = check_tasks([UNWRITABLE, GOOD], GateConfig(k=1, hacks=(), concurrency=1))
  bad, good = reports
  assert bad.task_id == "unwritable" and not bad.ok and "TypeError" in bad.infra_error
  assert good.ok and good.infra_error is None, good.reasons


def test_an_episode_raising_in_rl_rollouts_is_retried_and_the_run_goes_on(tmp_path):
  """A run_episode that raises once for one trajectory: that attempt is an infra error
  (retried), the batch still comes."""
  eps = Episodes(NullAgent())
  calls = []

  def run_episode(task, tid, seed):
    calls.append(tid)
    if tid == "g0000000-s00" and calls.count(tid) == 1:
      raise RuntimeError("one bad trajectory")
    return eps(task, tid, seed)

  class Tasks:
    def task_for(self, gid):
      return procedural.generate("echo_word", gid)

    def get(self, task_id):
      raise KeyError(task_id)

    def state_dict(self):
      return {}

  buf = StalenessBuffer(batch_size=1, max_staleness=0)
  m = RolloutManager(
    RolloutConfig(group_size=2, max_concurrency=2, dynamic_sampling=False),
    run_episode=run_episode,
    tasks=Tasks(),
    buffer=buf,
    store=TrajectoryStore(tmp_path),
  )
  m.start()
  try:
    (group,) = buf.get_batch(timeout=300)
  finally:
    m.stop()
  assert group.group_id == 0 and calls.count("g0000000-s00") == 2
  assert not any(r["infra_error"] for r in group.rows)
