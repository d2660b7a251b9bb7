"""`launch.sweep --arm=... --eval=...`: named arms (GRPO, RFT, a warm start alone) of a tiny toy
run, each evaluated by a real `launch.eval --checkpoint={workdir}` when it finishes, then one
launch.compare_evals table and plot over them; a second sweep skips what is done."""

import json
import os
import pathlib
import subprocess
import sys

from launch.sweep import parse_arms, plan

ROOT = pathlib.Path(__file__).resolve().parents[1]
SETS = {
  "loop.steps": 1,
  "loop.batch_groups": 2,
  "rollout.group_size": 2,
  "sft.steps": 2,
  "sft.demos": 2,
  "sft.batch_size": 2,
}
ARMS = ["grpo:loop.algorithm=grpo", "rft:loop.algorithm=rft", "warm:loop.steps=0"]
EVAL = (
  f"{sys.executable} -m launch.eval --procedural=echo_word --procedural_tasks=1 --agent=policy "
  "--checkpoint={workdir} --tokenizer=byte --max_turns=1 --max_new_tokens=48 "
  "--max_episode_tokens=48 --max_context_tokens=224 --trials=2 --greedy=false "
  "--mismatch_episodes=0 --export_failures=false --out={workdir}/eval"
)


def _sweep(workdir):
  cmd = [sys.executable, "-m", "launch.sweep", "--config=configs/toy.py", f"--workdir={workdir}"]
  cmd += [f"--arm={a}" for a in ARMS] + [f"--set={k}={v}" for k, v in SETS.items()]
  cmd += [f"--eval={EVAL}"]
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  env.pop("XLA_FLAGS", None)  # one CPU device, like a user's run
  return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=2400)


def test_parse_arms():
  assert parse_arms(["a:loop.steps=0,sft.steps=3", "b:"]) == [
    ("a", {"loop.steps": "0", "sft.steps": "3"}),
    ("b", {}),
  ]
  assert parse_arms([]) == [("", {})]
  for bad in (["loop.steps=0"], ["a:loop.steps"], ["a:x=1", "a:y=2"], ["a b:x=1"]):
    try:
      parse_arms(bad)
    except ValueError as e:
      assert "--arm" in str(e)
    else:
      raise AssertionError(f"{bad} was accepted")


def test_plan_substitutes_the_sweep_folder(tmp_path):
  arms = parse_arms(["warm:loop.steps=0", "grpo:checkpoint={sweep}/warm,sft.steps=0"])
  jobs = plan(
    "configs/toy.py", tmp_path / "s", [("loop.seed", ["0", "1"])], {"sft.demos": "2"}, arms
  )
  names = [d.name for d, _, _ in jobs]
  assert names == ["warm,seed=0", "warm,seed=1", "grpo,seed=0", "grpo,seed=1"]
  grpo = jobs[2][2]
  assert f"--config.checkpoint={(tmp_path / 's').resolve()}/warm" in grpo
  assert "--config.sft.steps=0" in grpo and "--config.sft.demos=2" in grpo
  assert f"--workdir={tmp_path / 's' / 'grpo,seed=0'}" in grpo
  assert not any("{sweep}" in a for _, _, cmd in jobs for a in cmd)


def test_sweep_arms_each_evaluated_then_compared(tmp_path):
  out = _sweep(tmp_path)
  assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
  for arm in ("grpo", "rft", "warm"):
    summary = json.loads((tmp_path / arm / "summary.json").read_text())
    assert summary["step"] == (0 if arm == "warm" else 1), summary
    res = json.loads((tmp_path / arm / "eval" / "results.json").read_text())
    assert len(res["trials"]) == 2
  exp = json.loads((tmp_path / "rft" / "experiment.json").read_text())
  assert exp["loop"]["algorithm"] == "rft" and exp["loop"]["steps"] == 1
  table = (tmp_path / "compare.md").read_text()
  assert all(f"| {arm} |" in table for arm in ("grpo", "rft", "warm")), table
  assert (tmp_path / "compare.png").stat().st_size > 0 and table in out.stdout
  again = _sweep(tmp_path)
  assert again.returncode == 0 and again.stdout.count("finished before, skipped") == 3
