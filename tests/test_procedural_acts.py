"""envs/procedural_acts.py: each primitive-act family's test.sh passes the reference solution
and the demonstration (its shell calls in order) and fails the sloppy acts (the act on the
wrong file, the original lost, no act), run by bash over the task's files in a temp folder (the
grader's contract: $AGENTRL_WORKSPACE, $LOGS_DIR); configs/smollm2_nodemo_acts.py keeps N and U
as configs/smollm2_nodemo.py does, and configs/smollm2_nodemo_notes.py shares its warm start."""

import dataclasses
import re

import pytest
from shell_grade import reward

from configs import (
  smollm2_nodemo,
  smollm2_nodemo_acts,
  smollm2_nodemo_notes,
  smollm2_nodemo_notes_t1,
)
from envs import procedural, procedural_acts
from envs.agents.tool_format import parse_tool_call
from envs.procedural import family
from rl import config as rl_config
from rl.runtime.task_sources import content_key, make_task_source


def _demo(task) -> list[str]:
  calls = [parse_tool_call(a) for a in dict(task.metadata)["demo_actions"]]
  assert calls[-1].name == "finish" and all(c.name == "shell" for c in calls[:-1])
  return [c.arguments["command"] for c in calls[:-1]]


WRONG = {  # sloppy acts, each of which must score 0
  "copy_one": ["mv {folder}/* {dst}.txt", "true", "touch {dst}.txt"],
  "delete_ext": ["rm -r {folder}", "rm $(ls -d {folder}/* | grep -v '[.]{ext}$' | head -n1)"],
  "rename_one": ["cp {folder}/* {folder}/{new}.txt", "mv {folder}/* {new}.txt"],
  "strip_ext": ["cp {holder}.txt {out}.txt", "echo {holder} > {out}.txt"],
  "find_line": ["cp {log}.log {out}.txt", "echo {magic} > {out}.txt"],
}


def _names(instruction: str) -> dict:
  """The names an instruction gives (folder, target, extension, word...), for the wrong acts."""
  pats = {
    "folder": r"folder (\w+)/", "dst": r"file named (\w+)\.txt", "ext": r"extension \.(\w+)",
    "new": r"Rename it to (\w+)\.txt", "holder": r"^The file (\w+)\.txt",
    "out": r"to (\w+)\.txt\.$", "log": r"of (\w+)\.log", "magic": r"the word (\w+)",
  }  # fmt: skip
  return {k: (m.group(1) if (m := re.search(v, instruction)) else "") for k, v in pats.items()}


@pytest.mark.parametrize("seed", [0, 7])
def test_act_families_grade_the_act_and_its_demonstration(tmp_path, seed):
  for fam in procedural_acts.FAMILIES:
    task = procedural.generate(fam, seed)
    assert family(task.id) == fam and task.difficulty == 1
    fill = _names(task.instruction)
    ref = reward(tmp_path / fam / "ref", task, [task.solution_script])
    assert ref == 1.0, (fam, task.solution_script)
    demo = _demo(task)
    assert len(demo) == (1 if fam == "find_line" else 2), demo
    assert reward(tmp_path / fam / "demo", task, demo) == 1.0, (fam, demo)
    for i, cmd in enumerate(WRONG[fam]):
      assert reward(tmp_path / fam / f"w{i}", task, [cmd.format(**fill)]) == 0.0, (fam, cmd)


def test_delete_ext_keeps_every_other_file_and_never_uses_key(tmp_path):
  for seed in range(20):
    task = procedural.generate("delete_ext", seed)
    paths = [f.path for f in task.workspace_files]
    ext = task.instruction.split("extension .")[1].split(".")[0]
    assert sum(p.endswith("." + ext) for p in paths) == 1 and len(paths) >= 3
    assert not any(p.endswith(".key") for p in paths)  # find_ext's extension (N) stays N's


def test_acts_config_adds_the_acts_to_d_only(tmp_path):
  acts = set(smollm2_nodemo_acts.ACTS.split(","))
  d = set(smollm2_nodemo_acts.D.split(","))
  assert d == set(smollm2_nodemo.D.split(",")) | acts
  assert (smollm2_nodemo_acts.N, smollm2_nodemo_acts.U) == (smollm2_nodemo.N, smollm2_nodemo.U)
  exp = rl_config.to_experiment(smollm2_nodemo_acts.get_config())
  src, evals = make_task_source(exp.env, 0, tmp_path, None)
  demos = src.demo_tasks(10_000)
  assert {family(t.id) for t in demos} == d and len(demos) == exp.sft.demos == 64 * len(d)
  n_u = set(smollm2_nodemo.N.split(",")) | set(smollm2_nodemo.U.split(","))
  assert {family(t.id) for t in evals} == n_u
  assert not {content_key(t) for t in evals} & {content_key(t) for t in demos}
  # the same held-out tasks as the first comparison, so the two sets of arms compare
  _, first = make_task_source(rl_config.to_experiment(smollm2_nodemo.get_config()).env, 0,
                              tmp_path / "first", None)  # fmt: skip
  assert [t.id for t in evals] == [t.id for t in first]


def test_notes_config_trains_on_the_note_families_from_the_acts_warm_start(tmp_path):
  """configs/smollm2_nodemo_notes.py moves N to the note families; its warm start is the acts
  config's (the same demonstrations in the same order) and its held-out tasks the same ones."""
  n, u = set(smollm2_nodemo_notes.N.split(",")), set(smollm2_nodemo_notes.U.split(","))
  first = set(smollm2_nodemo.N.split(",")) | set(smollm2_nodemo.U.split(","))
  assert len(n) >= 3 and len(u) >= 2 and not n & u and n | u == first - {"note_mkdir"}
  notes, acts = (rl_config.to_experiment(m.get_config()) for m in (smollm2_nodemo_notes,
                                                                    smollm2_nodemo_acts))  # fmt: skip
  assert dataclasses.replace(notes.env, tasks="") == dataclasses.replace(acts.env, tasks="")
  assert (notes.sft, notes.loop, notes.train) == (acts.sft, acts.loop, acts.train)
  src, evals = make_task_source(notes.env, 0, tmp_path / "notes", None)
  src_acts, evals_acts = make_task_source(acts.env, 0, tmp_path / "acts", None)
  assert [t.id for t in src.demo_tasks(10_000)] == [t.id for t in src_acts.demo_tasks(10_000)]
  assert sorted(t.id for t in evals) == sorted(
    t.id for t in evals_acts if family(t.id) != "note_mkdir"
  )
  assert {family(t) for t in src.pool.tasks} == n
  held = {content_key(t) for t in evals}
  assert not held & {content_key(t) for t in src.pool.tasks.values()}
  assert len(src.pool.tasks) == 64 * len(n) and not src.decontamination["excluded"]


def test_notes_t1_config_is_the_notes_config_sampling_at_1():
  """configs/smollm2_nodemo_notes_t1.py is exactly the notes config with agent.temperature=1.0,
  the override its recorded arms ran with."""
  t1, notes = (rl_config.to_experiment(m.get_config()) for m in (smollm2_nodemo_notes_t1,
                                                                 smollm2_nodemo_notes))  # fmt: skip
  assert notes.agent.temperature == 0.7 and t1.agent.temperature == 1.0
  assert t1 == dataclasses.replace(notes, agent=dataclasses.replace(notes.agent, temperature=1.0))
