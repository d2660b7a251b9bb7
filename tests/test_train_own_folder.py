"""Training on one's own task folder: a reference solution longer than the agent's turn budget
is dropped as a demonstration with a line naming the task; when none is left, the run stops
with one line naming the budget and the longest solution (no traceback, no warm start)."""

import dataclasses
import pathlib
import subprocess
import sys

from envs import flywheel, procedural
from envs.agents.agent import AgentConfig
from envs.agents.tool_format import format_tool_call
from models.io.tokenizer import ByteTokenizer
from rl.warm_start import within_budget

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _folder(root: pathlib.Path, n: int, solution_chars: int) -> pathlib.Path:
  base = procedural.generate("echo_word", 5)
  for i in range(n):
    pad = "# " + "x" * solution_chars + "\n"
    task = dataclasses.replace(base, solution_script=pad + base.solution_script)
    flywheel.write_task_folder(task, root / f"long-{i}", f"long-{i}")
  return root


def test_long_solutions_stop_the_run_in_one_line(tmp_path):
  tasks = _folder(tmp_path / "tasks", 3, 300)
  wd = tmp_path / "run"
  cmd = [sys.executable, "-m", "launch.train", "--config=configs/toy.py", f"--workdir={wd}",
         f"--config.env.tasks={tasks}", "--config.sft.demos=3"]  # fmt: skip
  p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
  assert p.returncode == 2, p.stderr[-3000:]
  assert "Traceback" not in p.stderr + p.stdout
  dropped = [ln for ln in p.stdout.splitlines() if ln.startswith("warning: demonstration of")]
  assert len(dropped) == 3 and "> agent.max_new_tokens=112" in dropped[0], p.stdout[-3000:]
  last = p.stderr.strip().splitlines()[-1]
  assert last.startswith("error: warm start: no reference solution fits the turn budget "
                         "(agent.max_turns=1, agent.max_new_tokens=112); the longest, "), last  # fmt: skip
  assert "tasks/long-" in last and "raise the budget" in last


def test_within_budget_keeps_what_fits():
  tok, said = ByteTokenizer(), []
  short, long = "echo a > a.txt", "echo " + "b" * 200
  tasks = [procedural.generate("echo_word", s) for s in range(3)]
  acts = [[format_tool_call("shell", command=c), format_tool_call("finish")]
          for c in (short, long, short)]  # fmt: skip
  budget = AgentConfig(max_turns=1, max_new_tokens=112, max_episode_tokens=112)
  kept, kept_acts = within_budget(tasks, acts, tok, budget, said.append)
  assert [t.id for t in kept] == [tasks[0].id, tasks[2].id] and kept_acts == [acts[0], acts[2]]
  assert len(said) == 1 and tasks[1].id in said[0]
  two_turns = [[format_tool_call("shell", command=short)] * 2 + [format_tool_call("finish")]]
  kept, _ = within_budget(
    tasks[:1],
    two_turns,
    tok,
    dataclasses.replace(budget, max_turns=2, max_episode_tokens=224),
    said.append,
  )
  assert len(kept) == 1  # the closing finish needs no turn of its own
