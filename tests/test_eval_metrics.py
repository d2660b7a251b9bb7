"""envs.metrics and the pure parts of envs.grading.milestones: pass@k against a hand-computed case and
a naive enumeration, aggregation per domain / difficulty, and episode summaries."""

import itertools
import math

import pytest

from envs import metrics
from envs.grading import milestones as ml
from envs.task import Constraint, Milestone, Task, TestSpec


def _naive_pass_at_k(n, c, k):
  """The definition: the share of k-subsets of the n trials that hold at least one success."""
  outcomes = [1] * c + [0] * (n - c)
  subsets = list(itertools.combinations(range(n), k))
  return sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_hand_computed():
  # n=5, c=2, k=2: 1 - C(3,2)/C(5,2) = 1 - 3/10 = 0.7
  assert metrics.pass_at_k(5, 2, 2) == pytest.approx(0.7, abs=1e-12)
  # n=4, c=1, k=1 is the plain rate 1/4; k=4 sees every trial
  assert metrics.pass_at_k(4, 1, 1) == pytest.approx(0.25, abs=1e-12)
  assert metrics.pass_at_k(4, 1, 4) == 1.0
  assert metrics.pass_at_k(10, 0, 3) == 0.0
  assert metrics.pass_at_k(3, 3, 1) == 1.0


@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_pass_at_k_matches_enumeration_and_binomials(n):
  for c in range(n + 1):
    for k in range(1, n + 1):
      got = metrics.pass_at_k(n, c, k)
      assert got == pytest.approx(_naive_pass_at_k(n, c, k), abs=1e-12)
      assert got == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-12)


def test_pass_at_k_stable_for_large_n():
  # C(2000, 1000) overflows a float; the product form stays exact enough.
  got = metrics.pass_at_k(2000, 3, 1000)
  assert got == pytest.approx(1 - (1000 * 999 * 998) / (2000 * 1999 * 1998), rel=1e-12)
  with pytest.raises(ValueError):
    metrics.pass_at_k(3, 4, 1)
  with pytest.raises(ValueError):
    metrics.pass_at_k(3, 1, 4)


def _trial(task, domain, difficulty, passed, masked=False, checks=None, turns=3):
  return {
    "task_id": task,
    "suite": task.split("/")[0],
    "domain": domain,
    "difficulty": difficulty,
    "passed": passed,
    "reward": None if masked else float(passed),
    "masked": masked,
    "failure_mode": "infra_error" if masked else ("none" if passed else "tests_failed"),
    "turns": turns,
    "tokens": 10 * turns,
    "wall_s": 1.0,
    "checks": checks,
  }


def test_aggregate_by_domain_difficulty_and_masking():
  t = [
    _trial("s/a", "text", 1, True),
    _trial("s/a", "text", 1, False),
    _trial("s/a", "text", 1, False, masked=True),  # not an attempt: left out
    _trial("s/b", "git", 3, False),
    _trial("s/b", "git", 3, False),
    _trial("s/c", "git", 3, True),
    _trial("s/c", "git", 3, True),
  ]
  s = metrics.aggregate(t, ks=[1, 2])
  assert s["masked_trials"] == 1
  assert s["failure_modes"] == {"infra_error": 1, "none": 3, "tests_failed": 3}
  by_task = {x["task_id"]: x for x in s["tasks"]}
  assert by_task["s/a"]["n"] == 2 and by_task["s/a"]["passed"] == 1
  assert by_task["s/a"]["pass@k"] == {"1": 0.5, "2": 1.0}
  # overall pass@1 is the mean over tasks: (0.5 + 0 + 1) / 3
  assert s["overall"]["pass@1"] == pytest.approx(0.5)
  assert s["overall"]["pass@k"]["2"] == pytest.approx((1.0 + 0.0 + 1.0) / 3)
  assert s["by_domain"]["text"]["pass@1"] == pytest.approx(0.5)
  assert s["by_domain"]["git"]["pass@1"] == pytest.approx(0.5)
  assert s["by_difficulty"]["3"]["tasks"] == 2 and s["by_difficulty"]["1"]["trials"] == 2
  assert s["overall"]["completion"] == pytest.approx(3 / 6)  # no milestones: completion == passed


def _task(milestones=(), constraints=()):
  return Task(
    id="t/x", instruction="x", domain="text", difficulty=1, tests=TestSpec(),
    milestones=tuple(milestones), constraints=tuple(constraints),
  )  # fmt: skip


TASK = _task(
  [Milestone("a", "true"), Milestone("b", "true"), Milestone("c", "true")],
  [
    Constraint("keep_raw", "unchanged", paths=("raw/",)),
    Constraint("only_out", "only_write_under", paths=("out/", "/workspace/notes.txt")),
    Constraint("cmd", "command", check="true"),
  ],
)


def test_path_violations():
  assert ml.path_violations(TASK, ["out/a.txt", "notes.txt", "out/__pycache__/x.pyc"]) == []
  assert ml.path_violations(TASK, ["raw/data.csv"]) == ["keep_raw", "only_out"]
  assert ml.path_violations(TASK, ["stray.txt", "src/__pycache__/m.pyc"]) == ["only_out"]
  assert ml.changed_paths({"a": "1", "b": "2"}, {"a": "1", "b": "3", "c": "4"}) == ["b", "c"]
  assert ml.changed_paths({"a": "1"}, {}) == ["a"]
  assert ml.path_matches("raw/x/y.csv", "raw") and ml.path_matches("a.py", "*.py")
  assert not ml.path_matches("rawdata.csv", "raw/")


def test_summarize_first_reached_regressions_and_first_violation():
  T = ml.TurnCheck
  checks = [
    T(0, (False, False, False), ()),
    T(1, (True, False, False), ()),
    T(2, (True, True, False), ("only_out",)),
    T(3, (False, True, False), ("only_out", "cmd")),
    T(4, (False, True, True), ("cmd",)),
  ]
  s = ml.summarize(TASK, checks)
  assert s["first_reached"] == {"a": 1, "b": 2, "c": 4}
  assert s["final"] == {"a": False, "b": True, "c": True}
  assert s["regressed"] == ["a"]
  assert s["reached"] == 3 and s["step_success"] == 1.0
  assert s["first_violation"] == {"keep_raw": None, "only_out": 2, "cmd": 3}
  assert s["first_violation_turn"] == 2 and s["forgot"] is True
  assert s["violated_at_end"] == ["cmd"]
  clean = ml.summarize(TASK, [T(0, (False,) * 3, ()), T(1, (True, False, False), ())])
  assert clean["step_success"] == pytest.approx(1 / 3) and clean["forgot"] is False
  assert clean["first_violation_turn"] is None


def test_parse_check_output_ignores_foreign_lines():
  out = (
    'noise\n@@AGENTRL_CHECK:n1:manifest:{"a": "x"}\n@@AGENTRL_CHECK:n1:m0:0\n'
    "@@AGENTRL_CHECK:n1:m1:3\n@@AGENTRL_CHECK:OTHER:m2:0\n"
  )
  codes, manifest = ml.parse_check_output(out, "n1")
  assert codes == {"m0": 0, "m1": 3} and manifest == {"a": "x"}


def test_long_horizon_metrics_and_curve():
  def ch(first_reached, total, first_violation):
    return {
      "milestones": list(first_reached), "constraints": ["k"], "first_reached": first_reached,
      "total": total, "step_success": sum(v is not None for v in first_reached.values()) / total,
      "forgot": first_violation is not None, "first_violation_turn": first_violation,
      "checked_turns": [0, 1, 2, 3],
    }  # fmt: skip

  t = [
    _trial("s/a", "text", 2, True, checks=ch({"x": 1, "y": 2}, 2, None)),
    _trial("s/a", "text", 2, True, checks=ch({"x": 1, "y": 3}, 2, 3)),  # passed but forgot
    _trial("s/b", "git", 2, False, checks=ch({"x": 2, "y": None}, 2, 1)),
  ]
  s = metrics.aggregate(t, ks=[1])
  o = s["overall"]
  assert o["step_success"] == pytest.approx((1 + 1 + 0.5) / 3)
  assert o["completion"] == pytest.approx(1 / 3)
  assert o["forgetting"] == pytest.approx(2 / 3)
  assert o["first_violation_mean"] == pytest.approx(2.0) and o["first_violation_median"] == 2.0
  # share of milestones reached by turn 0..3, averaged over trials
  assert s["milestone_curve"] == pytest.approx(
    [0, (0.5 + 0.5 + 0) / 3, (1 + 0.5 + 0.5) / 3, (1 + 1 + 0.5) / 3]
  )


def test_task_and_infra_errors_are_counted_apart():
  def row(tid, passed, mode="none", masked=False):
    return {"task_id": tid, "passed": passed, "failure_mode": mode, "masked": masked}

  trials = [
    row("a", True),
    row("a", False, "tests_failed"),
    row("b", True),
    row("c", False, "load_error", True),
    row("d", False, "task_error", True),
    row("e", False, "sandbox_error", True),
  ]
  assert metrics.trial_counts(trials) == {"trials": 6, "graded": 3, "task_error": 2, "infra": 1}
  # by hand: a 1/2, b 1/1, c 0/1, d 0/1 (e is infrastructure, left out): (0.5 + 1) / 4
  assert metrics.pass_at_1_all(trials) == 0.375
