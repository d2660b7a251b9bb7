"""The native task format's test contract ($AGENTRL_WORKSPACE, $LOGS_DIR/reward.txt) and
Harbor's habits (/logs/verifier/reward.txt, /tests/...) graded alike in a native task folder,
end to end through launch.eval (oracle agent, real bubblewrap sandboxes)."""

import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
TOML = 'id = "{id}"\ndomain = "file_ops"\ndifficulty = 1\n[verifier]\nrunner = "{runner}"\n'
SHELL_TESTS = {
  "native": 'grep -qx hi "$AGENTRL_WORKSPACE/out.txt" && echo 1 > "$LOGS_DIR/reward.txt" '
  '|| echo 0 > "$LOGS_DIR/reward.txt"\n',
  "harbor": 'want=$(cat /tests/want.txt)\ngrep -qx "$want" "$AGENTRL_WORKSPACE/out.txt" '
  "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n",
}
PYTEST = (
  "import pathlib\n\ndef test_out():\n"
  "  want = pathlib.Path('/tests/want.txt').read_text().strip()\n"
  "  assert (pathlib.Path('/workspace') / 'out.txt').read_text().strip() == want\n"
)


def _task(root: pathlib.Path, name: str, runner: str, tests: dict[str, str]):
  d = root / name
  (d / "tests").mkdir(parents=True)
  (d / "solution").mkdir()
  (d / "task.toml").write_text(TOML.format(id=name, runner=runner))
  (d / "instruction.md").write_text("Write hi into out.txt.\n")
  (d / "solution" / "solve.sh").write_text("echo hi > out.txt\n")
  for f, text in {**tests, "want.txt": "hi\n"}.items():
    (d / "tests" / f).write_text(text)


def test_native_and_harbor_paths_grade_alike(tmp_path):
  tasks = tmp_path / "tasks"
  for kind, script in SHELL_TESTS.items():
    _task(tasks, f"shell-{kind}", "shell", {"test.sh": script})
  _task(tasks, "pytest-harbor", "pytest", {"test_out.py": PYTEST})
  out = tmp_path / "ev"
  cmd = [sys.executable, "-m", "launch.eval", f"--tasks={tasks}", "--agent=oracle", f"--out={out}"]
  p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert p.returncode == 0, p.stderr[-3000:]
  trials = json.loads((out / "results.json").read_text())["trials"]
  got = {t["task_id"].split("/")[-1]: (t["passed"], t["failure_mode"]) for t in trials}
  assert got == {n: (True, "none") for n in ("shell-native", "shell-harbor", "pytest-harbor")}
