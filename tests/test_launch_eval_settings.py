"""A trained run evaluated with the obvious command: `launch.eval --checkpoint=WORKDIR` and no
agent flags runs the run's own agent and engine settings (system prompt, protocol, budgets,
sampling) and scores what the run's held-out eval reported; a flag still overrides one."""

import dataclasses
import json
import pathlib
import subprocess
import sys

from toy_config import toy_experiment

from envs import flywheel
from rl.runtime import run as rl_run
from rl.runtime import run_settings
from rl.runtime.task_sources import ProceduralTasks

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _train(wd: pathlib.Path):
  """The toy run, one RL step; its held-out eval is the training task itself (the toy model
  memorises one task, so a real held-out task would score 0 under any settings)."""
  exp = toy_experiment()
  exp = dataclasses.replace(
    exp,
    env=dataclasses.replace(exp.env, eval_tasks=1),
    loop=dataclasses.replace(exp.loop, steps=1, batch_groups=1),
    rollout=dataclasses.replace(exp.rollout, group_size=2),
    sft=dataclasses.replace(exp.sft, demos=2),
  )
  holder = {}

  def source(workdir, on_event):
    src = ProceduralTasks("echo_word", exp.loop.seed, workdir, (), on_event, pool_size=1)
    holder["task"] = src.task_for(0)
    return src, [holder["task"]]

  summary = rl_run.run(exp, str(wd), task_source=source)
  return summary, holder["task"]


def _eval(out, *args):
  cmd = [sys.executable, "-m", "launch.eval", "--agent=policy", f"--out={out}", *args]
  return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)


def test_eval_of_a_workdir_uses_the_runs_settings(tmp_path):
  summary, task = _train(tmp_path / "run")
  reported = summary["eval_last"]
  assert reported == 1.0, summary  # the toy's warm start solves its one task greedily
  flywheel.write_task_folder(task, tmp_path / "tasks" / "t0", "t0")
  common = [f"--checkpoint={tmp_path / 'run'}", f"--tasks={tmp_path / 'tasks'}"]
  p = _eval(tmp_path / "ev", *common, "--mismatch_episodes=0")
  assert p.returncode == 0, p.stderr[-3000:]
  assert json.loads(p.stdout)["pass@1"] == reported, p.stderr[-3000:]
  said = [ln for ln in p.stderr.splitlines() if ln.startswith("settings of the run")]
  assert said and "max_turns=1" in said[0] and "system_prompt=''" in said[0], p.stderr[-3000:]
  assert (
    json.loads((tmp_path / "ev" / "results.json").read_text())["config"]["settings"][
      "max_new_tokens"
    ]
    == 112
  )
  # A flag overrides the run's value and is named as such.
  p = _eval(tmp_path / "ev2", *common, "--max_new_tokens=100", "--mismatch_episodes=0")
  assert p.returncode == 0 and "from flags: --max_new_tokens=100" in p.stderr, p.stderr[-3000:]


def test_export_carries_the_settings(tmp_path):
  exp = toy_experiment()
  stored = run_settings.from_experiment(exp)
  (tmp_path / "agentrl_export.json").write_text(json.dumps({"settings": stored}))
  got = run_settings.read(tmp_path)
  assert got["agent"]["max_context_tokens"] == 224 and got["system_prompt"] == ""
  assert got["agent"]["greedy"] is exp.env.eval_greedy  # the run's eval decoding, not training's
  chosen, lines = run_settings.choose(got, {"max_turns": 3}, {"max_turns": 30, "protocol": "x"})
  assert chosen["max_turns"] == 3 and chosen["protocol"] == "tool_call"
  assert lines[1] == "from flags: --max_turns=3"
  assert run_settings.read(tmp_path / "none") is None
