"""The built-in suites through the evaluation runner on real bubblewrap sandboxes: the oracle
scores 100% and the null agent 0% (the whole long-horizon suite plus a sample of the others),
the `launch.eval` entry point end to end, the flywheel export and the decontamination report."""

import dataclasses
import json
import subprocess
import sys

import pytest

from envs import eval as ev
from envs import flywheel, metrics, report
from envs.agents.scripted import solution_steps
from envs.formats.loading import builtin_tasks, load_tasks
from envs.task import BUILTIN_DIR, load_task

LH = load_tasks(BUILTIN_DIR / "long_horizon")
OTHERS = ev.sample_tasks([t for t in builtin_tasks() if t.suite != "long_horizon"], 3, seed=0)


def test_long_horizon_suite_shape():
  assert len(LH) >= 15 and len({t.id for t in LH}) == len(LH)
  for t in LH:
    steps = solution_steps(t)
    assert len(steps) >= 10, t.id
    assert len(t.milestones) >= 10, t.id
    kinds = {c.kind for c in t.constraints}
    assert len(t.constraints) >= 2 and {"unchanged", "only_write_under"} & kinds, t.id
    assert "Rules for the whole task" in t.instruction, t.id
    assert "long-horizon" in t.tags, t.id


def test_oracle_scores_100_percent(tmp_path):
  tasks = LH + OTHERS
  trials = ev.evaluate(tasks, ev.make_agent("oracle"), ev.EvalConfig(concurrency=2))
  bad = [(t["task_id"], t["failure_mode"], t["detail"][-300:]) for t in trials if not t["passed"]]
  assert not bad
  for t in trials:
    if t["suite"] != "long_horizon":
      continue
    ch = t["checks"]
    assert t["turns"] >= 10 and ch["step_success"] == 1.0 and ch["regressed"] == [], t["task_id"]
    assert ch["forgot"] is False and ch["first_violation_turn"] is None, (t["task_id"], ch)
    # nothing is reached before the agent acts
    assert all(v > 0 for v in ch["first_reached"].values()), t["task_id"]
  summary = report.write_reports(tmp_path, trials, {"agent": "oracle"})
  o = summary["overall"]
  assert o["pass@1"] == 1.0 and o["completion"] == 1.0 and o["forgetting"] == 0.0
  assert summary["by_suite"]["long_horizon"]["step_success"] == 1.0
  assert summary["milestone_curve"][0] == 0.0 and summary["milestone_curve"][-1] == 1.0
  assert summary["failure_modes"] == {"none": len(tasks)}


def test_null_scores_0_through_launch_eval(tmp_path):
  out = tmp_path / "ev"
  cmd = [
    sys.executable, "-m", "launch.eval", "--tasks=long_horizon", "--agent=null",
    "--concurrency=2", f"--out={out}", "--train_tasks=core", "--seed=3",
  ]  # fmt: skip
  r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
  assert r.returncode == 0, r.stderr[-3000:]
  doc = json.loads((out / "results.json").read_text())
  assert len(doc["trials"]) == len(LH) and not any(t["passed"] for t in doc["trials"])
  modes = [(t["task_id"], t["failure_mode"], t["detail"][-200:]) for t in doc["trials"]]
  assert all(m[1] == "tests_failed" for m in modes), modes
  assert doc["summary"]["overall"]["pass@1"] == 0.0 and doc["config"]["seed"] == 3
  assert all(t["checks"]["step_success"] == 0.0 for t in doc["trials"])
  assert "| long_horizon |" in (out / "summary.md").read_text()
  assert (out / "report.html").read_text().count("data:image/png;base64,") >= 4
  # flywheel: every failure exported with a loadable draft task
  rows = [json.loads(x) for x in (out / "flywheel" / "failures.jsonl").read_text().splitlines()]
  assert len(rows) == len(LH) and all(r["failure_mode"] != "none" for r in rows)
  drafts = load_tasks(out / "flywheel")
  assert len(drafts) == len(LH) and all(d.id.startswith("flywheel/") for d in drafts)
  by_origin = {t.id: t for t in LH}
  for d in drafts:
    src = by_origin[dict(d.metadata)["origin"]]
    assert "flywheel" in d.tags and dict(d.metadata)["failure_mode"] in d.tags
    same = ("instruction", "tests", "solution_script", "solution_files", "workspace_files")
    same += ("setup_script", "setup_files", "milestones", "constraints", "domain", "difficulty")
    assert all(getattr(d, f) == getattr(src, f) for f in same), d.id
  fail = json.loads((out / "flywheel" / f"{rows[0]['folder']}" / "failure.json").read_text())
  assert fail["instruction"] and fail["missed_milestones"] and fail["turn_checks"]
  dec = json.loads((out / "decontamination.json").read_text())
  assert dec["n_eval"] == len(LH) and dec["excluded"] == []
  # a drafted task is a working task: its oracle passes
  (trial,) = ev.evaluate(drafts[:1], ev.make_agent("oracle"), ev.EvalConfig())
  assert trial["passed"], trial["detail"]


def test_null_scores_0_on_other_suites():
  trials = ev.evaluate(OTHERS, ev.make_agent("null"), ev.EvalConfig(concurrency=2))
  assert [t["passed"] for t in trials] == [False] * len(OTHERS)
  assert metrics.aggregate(trials)["overall"]["pass@1"] == 0.0


def test_decontamination_flags_a_copied_task():
  copy = dataclasses.replace(LH[0], id="train/copy-of-" + LH[0].id.split("/")[-1])
  rep = flywheel.decontamination_report([copy, *OTHERS], LH)
  assert rep["excluded"] == [copy.id]
  assert rep["contaminated_eval_tasks"] == {LH[0].id: [copy.id]}
  assert rep["clean_eval_tasks"] == len(LH) - 1


def test_flywheel_draft_round_trips(tmp_path):
  t = LH[1]
  root = flywheel.write_task_folder(
    t, tmp_path / "x", "flywheel/x", ["a"], {"origin": t.id, "n": 2}
  )
  back = load_task(root)
  assert back.id == "flywheel/x" and back.tags == ("a",) and dict(back.metadata)["n"] == 2
  for f in dataclasses.fields(t):
    if f.name not in ("id", "tags", "metadata", "source"):
      assert getattr(back, f.name) == getattr(t, f.name), f.name


def test_resolve_tasks_errors():
  with pytest.raises(FileNotFoundError, match="neither a folder nor a built-in suite"):
    ev.resolve_tasks("no_such_suite")
  assert {t.suite for t in ev.resolve_tasks("long_horizon")} == {"long_horizon"}


@pytest.mark.docker
def test_docker_backend_oracle_and_null():
  tasks = [t for t in LH if t.id.endswith(("lh-git-release", "lh-sysconfig"))]
  cfg = ev.EvalConfig(backend="docker", concurrency=2)
  oracle = ev.evaluate(tasks, ev.make_agent("oracle"), cfg)
  assert [t["passed"] for t in oracle] == [True, True], [t["detail"] for t in oracle]
  assert all(t["checks"]["step_success"] == 1.0 and not t["checks"]["forgot"] for t in oracle)
  null = ev.evaluate(tasks, ev.make_agent("null"), cfg)
  assert [t["failure_mode"] for t in null] == ["tests_failed", "tests_failed"]


def test_a_task_with_an_unusable_spec_is_a_task_error_and_the_suite_goes_on():
  """A sandbox spec the task makes invalid (a malformed apt package name) fails that task
  only, as task_error naming the field; the other task is still graded."""
  good = builtin_tasks()[0]
  bad = dataclasses.replace(good, id="bad-spec", apt_packages=("vim; rm -rf /",))
  trials = ev.evaluate([bad, good], ev.make_agent("oracle"), ev.EvalConfig(concurrency=1))
  by_id = {t["task_id"]: t for t in trials}
  assert by_id["bad-spec"]["failure_mode"] == "task_error"
  assert "apt_packages" in by_id["bad-spec"]["detail"]
  assert by_id[good.id]["passed"], by_id[good.id]["detail"][-300:]
