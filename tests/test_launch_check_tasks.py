"""launch.check_tasks --procedural=N (a subprocess, real bwrap sandboxes): the seeded
generated tasks go through the gate, the report lists exactly them, exit status 0."""

import json
import pathlib
import subprocess
import sys

from envs import procedural

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_procedural_tasks_pass_the_gate(tmp_path):
  report, quarantine = tmp_path / "report.json", tmp_path / "quarantine.json"
  cmd = [sys.executable, "-m", "launch.check_tasks", "--procedural=2", "--seed=1", "--k=1"]
  cmd += ["--hacks=none", f"--report={report}", f"--quarantine={quarantine}"]
  p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
  doc = json.loads(report.read_text())
  want = [t.id for t in procedural.sample(2, 1)]
  assert sorted(t["task_id"] for t in doc["tasks"]) == sorted(want)
  assert doc["passed"] == doc["total"] == 2
  assert "2/2 tasks passed the gate" in p.stdout
