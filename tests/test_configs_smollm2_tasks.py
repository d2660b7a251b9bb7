"""The mixed, difficulty-stratified task source of configs/smollm2.py (no model, no sandbox)."""

import pytest

from configs import smollm2
from rl import config as rl_config
from rl.runtime import task_sources as ts
from rl.runtime.records import Group


def _source(tmp_path, spec=None, **kw):
  env = rl_config.to_experiment(smollm2.get_config()).env
  return ts.MixedTasks(
    spec or env.tasks, 0, tmp_path, eval_seed=env.eval_seed, n_eval=kw.get("n_eval", 4),
    per_family=kw.get("per_family", 16),
  )  # fmt: skip


def test_pool_holds_every_family_and_easy_core_tasks_and_no_held_out_one(tmp_path):
  src = _source(tmp_path)
  fams = smollm2.FAMILIES.split(",")
  ids = list(src.pool.tasks)
  assert {ts.family(i) for i in ids} == set(fams) | {"core"}
  assert all(src.pool.tasks[i].difficulty <= 1 for i in ids if i.startswith("core/"))
  assert sum(i.startswith("core/") for i in ids) >= 4
  assert len(src.eval_tasks) == 4 * len(fams)
  held = {ts.content_key(t) for t in src.eval_tasks}
  assert not held & {ts.content_key(t) for t in src.pool.tasks.values()}
  # sort_unique has one instruction for all seeds: the content (words.txt) tells tasks apart.
  su = [t for t in src.pool.tasks.values() if ts.family(t.id) == "sort_unique"]
  assert len({t.instruction for t in su}) == 1 and len({ts.content_key(t) for t in su}) == 16
  assert src.decontamination["n_eval"] == len(src.eval_tasks)


def test_sampling_is_stratified_mixed_and_resumes(tmp_path):
  src = _source(tmp_path)
  draws = [src.task_for(i).id for i in range(200)]
  assert len({ts.family(i) for i in draws}) == 6  # five families and core
  assert set(src.pool.strata()) >= {0, 1}  # difficulty 1 and 2 tasks: two strata at the start
  state = src.state_dict()
  again = _source(tmp_path)
  again.load_state_dict(state)
  assert [src.task_for(i).id for i in range(20)] == [again.task_for(i).id for i in range(20)]


def test_demonstration_tasks_spread_over_the_pool(tmp_path):
  src = _source(tmp_path)
  demos = src.demo_tasks(24)
  assert len({t.id for t in demos}) == 24  # distinct
  assert len({ts.family(t.id) for t in demos}) >= 5  # not the first ids in sort order
  assert [t.id for t in demos] == [t.id for t in _source(tmp_path).demo_tasks(24)]  # seeded
  assert len(src.demo_tasks(10_000)) == len(src.pool.active_ids())


def test_observe_batch_reports_per_family_pass_rates(tmp_path):
  src = _source(tmp_path)
  t = src.task_for(0)
  rows = [
    dict(task_id=t.id, passed=p, reward=float(p), failure_mode="none" if p else "wrong",
         grade_flags=[], commands=["true"])
    for p in (True, False, False, False)
  ]  # fmt: skip
  out = src.observe_batch([Group(0, t.id, rows)])
  assert out[f"family/{ts.family(t.id)}"] == 0.25


@pytest.mark.parametrize(
  "spec, match",
  [
    ("mixed:echo_word,nope", "unknown procedural family 'nope'"),
    ("mixed:echo_word+core", "is not <suite><=<max difficulty>"),
    ("mixed:+core<=1", "no procedural family"),
  ],
)
def test_bad_specs_name_the_cause(tmp_path, spec, match):
  with pytest.raises(ValueError, match=match):
    _source(tmp_path, spec)


def test_system_prompt_names_a_versioned_file():
  from envs.agents import agent
  from envs.agents import markdown_bash as mb
  from models.io.tokenizer import ByteTokenizer

  few = agent.make_format("markdown_bash", ByteTokenizer(), "markdown_bash_v2").system_prompt
  assert few == mb.load_system_prompt(2) != mb.load_system_prompt(1)
  assert few.count(mb.SENTINEL) == 3 and "Example 2." in few  # the rule and two examples
  with pytest.raises(ValueError, match="no markdown-bash system prompt version 9"):
    agent.make_format("markdown_bash", ByteTokenizer(), "markdown_bash_v9")
