"""Ctrl-C during the warm start stops at the next warm-start step (not after all of them), saves
it (WORKDIR/warm_start) and exits 130 with the resume command; `kill -9` loses only the steps
since the last save; the next run loads the saved demonstrations instead of replaying them and
goes on from the saved step. The real entry point, orbax, real sandboxes."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

from procs import with_parent

ROOT = pathlib.Path(__file__).resolve().parents[1]
STEPS = 2000  # far more than run before the Ctrl-C lands


def _sft_steps(wd: pathlib.Path) -> list[int]:
  path = wd / "metrics.jsonl"
  if not path.exists():
    return []
  recs = [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]
  return [r["sft_step"] for r in recs if "sft_step" in r]


def _saved(wd: pathlib.Path) -> list[int]:
  d = wd / "warm_start" / "checkpoints"
  return sorted(int(p.name) for p in d.iterdir() if p.name.isdigit()) if d.is_dir() else []


def _until(cond, proc, log, what: str) -> None:
  deadline = time.monotonic() + 600
  while not cond():
    assert proc.poll() is None, log.read_text()[-3000:]
    assert time.monotonic() < deadline, f"timed out waiting until {what}"
    time.sleep(0.05)


def test_ctrl_c_and_kill9_in_the_warm_start_resume(tmp_path):
  wd, log_path = tmp_path / "run", tmp_path / "log"
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  env.pop("XLA_FLAGS", None)
  cmd = [sys.executable, "-m", "launch.train", "--config=configs/toy.py", f"--workdir={wd}",
         f"--config.sft.steps={STEPS}", "--config.sft.log_every=1", "--config.sft.demos=2",
         "--config.sft.checkpoint_every_s=0"]  # fmt: skip
  procs = []
  try:
    with open(log_path, "w") as log:
      start = lambda: (
        procs.append(  # noqa: E731
          subprocess.Popen(
            with_parent(cmd), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT
          )
        )
        or procs[-1]
      )
      p = start()
      _until(lambda: len(_sft_steps(wd)) >= 2, p, log_path, "two warm-start steps were done")
      p.send_signal(signal.SIGINT)
      assert p.wait(timeout=600) == 130, log_path.read_text()[-3000:]
      first = log_path.read_text()
      assert max(_sft_steps(wd)) < STEPS - 1 and "[sft] stopped at warm-start step" in first
      assert "stopped in the warm start (saved in" in first and "resume with:" in first
      assert "Traceback" not in first, first[-3000:]
      assert not [p for p in (wd / "checkpoints").glob("*") if p.name.isdigit()]  # no RL yet
      at_ctrl_c = _saved(wd)[-1]
      assert at_ctrl_c >= 2, _saved(wd)

      p = start()  # resumes there; kill -9 once it saved two more steps
      _until(lambda: _saved(wd) and _saved(wd)[-1] >= at_ctrl_c + 2, p, log_path, "saved")
      p.send_signal(signal.SIGKILL)
      assert p.wait() == -signal.SIGKILL
      at_kill = _saved(wd)[-1]
      second = log_path.read_text()[len(first) :]
      assert f"resumed the warm start after step {at_ctrl_c} of {STEPS}" in second, second[-3000:]
      assert "demonstrations from" in second and "demonstrations (" not in second  # not replayed

      mark = len(log_path.read_text())
      p = start()
      _until(lambda: _saved(wd)[-1] > at_kill, p, log_path, "it saved past the kill")
      p.send_signal(signal.SIGINT)
      assert p.wait(timeout=600) == 130
      third = log_path.read_text()[mark:]
      assert f"resumed the warm start after step {at_kill} of {STEPS}" in third, third[-3000:]
  finally:
    for p in procs:
      if p.poll() is None:
        p.kill()
        p.wait()
  steps = _sft_steps(wd)  # no step skipped across the three lives
  assert set(steps) == set(range(max(steps) + 1)) and max(steps) >= at_kill, steps
