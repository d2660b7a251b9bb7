"""Ctrl-C during the warm start stops at the next warm-start step (not after all of them) and
exits 130, saying that the next run starts the warm start again; nothing was checkpointed."""

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


def test_ctrl_c_in_the_warm_start(tmp_path):
  wd = tmp_path / "run"
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  env.pop("XLA_FLAGS", None)
  cmd = [sys.executable, "-m", "launch.train", "--config=configs/toy.py", f"--workdir={wd}",
         f"--config.sft.steps={STEPS}", "--config.sft.log_every=1", "--config.sft.demos=2"]  # fmt: skip
  with open(tmp_path / "log", "w") as log:
    proc = subprocess.Popen(
      with_parent(cmd), stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT
    )
    try:
      deadline = time.monotonic() + 600
      while len(_sft_steps(wd)) < 2:  # two warm-start steps are done: it is in the loop
        assert proc.poll() is None, (tmp_path / "log").read_text()[-3000:]
        assert time.monotonic() < deadline, "the warm start did not start"
        time.sleep(0.05)
      proc.send_signal(signal.SIGINT)
      rc = proc.wait(timeout=600)
    finally:
      if proc.poll() is None:
        proc.kill()
  out = (tmp_path / "log").read_text()
  assert rc == 130, out[-3000:]
  assert max(_sft_steps(wd)) < STEPS - 1 and "[sft] stopped at warm-start step" in out, out[-3000:]
  assert (
    "stopped in the warm start (no checkpoint yet); run again" in out and "Traceback" not in out
  )
  assert not [p for p in (wd / "checkpoints").glob("*") if p.name.isdigit()]
