"""The policy agent through `launch.eval` and the library: a tiny random checkpoint saved with
models.io.hf and the byte tokenizer scores 0, and the same seed, checkpoint and tasks give the same
trajectories and scores under greedy decoding (one run in a subprocess, one in process)."""

import json
import subprocess
import sys

import jax

from envs import eval as ev
from envs.agents.agent import AgentConfig
from models import config
from models import transformer as tfm
from models.io import hf
from rl.runtime import replica

AGENT = dict(max_turns=3, max_new_tokens=24, max_episode_tokens=72, max_context_tokens=1024)
TASK_FILES = {
  "task.toml": """id = "tiny-copy"
domain = "file_ops"
difficulty = 1

[[milestones]]
name = "copied"
check = "cmp -s a.txt b.txt"

[[constraints]]
name = "keep_a"
kind = "unchanged"
paths = ["a.txt"]
""",
  "instruction.md": "Copy a.txt to b.txt. Never modify a.txt.\n",
  "environment/workspace/a.txt": "hello\n",
  "solution/solve.sh": "cp a.txt b.txt\n",
  "tests/test_copy.py": "import os\n\ndef test_b():\n  assert open('b.txt').read() == 'hello\\n'\n",
}
KEYS = ("task_id", "trial", "seed", "passed", "reward", "failure_mode", "finish_reason", "turns")
KEYS += ("tokens", "checks", "turn_checks")


def _checkpoint(path):
  cfg = config.tiny("qwen3", vocab_size=264, max_seq_len=1024)
  params = tfm.init(cfg, jax.random.PRNGKey(7))
  hf.save(path, cfg, params)
  return path


def _view(trials):
  return [
    {**{k: t[k] for k in KEYS}, "actions": [s["action"] for s in t["trajectory"]]} for t in trials
  ]


def test_policy_is_reproducible_under_greedy_decoding(tmp_path):
  ckpt = _checkpoint(tmp_path / "ckpt")
  task_dir = tmp_path / "tasks" / "tiny-copy"
  for rel, text in TASK_FILES.items():
    (task_dir / rel).parent.mkdir(parents=True, exist_ok=True)
    (task_dir / rel).write_text(text)
  out = tmp_path / "run1"
  cmd = [
    sys.executable, "-m", "launch.eval", f"--tasks={task_dir}", "--agent=policy",
    f"--checkpoint={ckpt}", "--tokenizer=byte", "--trials=2", "--concurrency=2", "--seed=11",
    f"--out={out}", *[f"--{k}={v}" for k, v in AGENT.items()],
  ]  # fmt: skip
  r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
  assert r.returncode == 0, r.stderr[-3000:]
  first = json.loads((out / "results.json").read_text())["trials"]
  # The report states the engine's train-inference mismatch: fp32 engine vs fp32 trainer.
  mm = json.loads((out / "results.json").read_text())["config"]["mismatch"]
  assert mm["engine"] == {"dtype": "float32", "weights": "float32", "kv": "float32"}
  assert mm["tokens"] == sum(t["tokens"] for t in first) > 0 and mm["max"] <= 1e-5, mm
  assert "## Train-inference mismatch" in (out / "summary.md").read_text()

  tasks = ev.resolve_tasks(str(task_dir))
  agent, close = replica.policy_from_checkpoint(
    str(ckpt), "byte", AgentConfig(greedy=True, **AGENT), 2
  )
  try:
    second = ev.evaluate(tasks, agent, ev.EvalConfig(trials=2, concurrency=2, seed=11))
  finally:
    close()
  assert _view(first) == _view(second)
  assert [t["passed"] for t in second] == [False, False] and all(t["tokens"] > 0 for t in second)
  assert all(t["turns"] >= 1 and t["checks"]["checked_turns"][0] == 0 for t in second)
  # trials of one task get distinct seeds (they differ only when sampling)
  assert second[0]["seed"] != second[1]["seed"]
