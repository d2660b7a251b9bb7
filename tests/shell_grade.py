"""Grading a procedural task's test.sh by hand: the task's files in a temp folder, the commands
run there by bash, then the test.sh under the grader's contract ($AGENTRL_WORKSPACE, $LOGS_DIR).
Shared by the procedural family tests."""

import subprocess


def reward(tmp_path, task, commands: list[str]) -> float:
  """The reward test.sh writes after `commands` ran in a fresh copy of the task's workspace."""
  ws, logs = tmp_path / "ws", tmp_path / "logs"
  ws.mkdir(parents=True)
  logs.mkdir()
  for f in task.workspace_files:
    (ws / f.path).parent.mkdir(parents=True, exist_ok=True)
    (ws / f.path).write_bytes(f.data)
  for command in commands:
    subprocess.run(["bash", "-c", command], cwd=ws, capture_output=True, check=False)
  test = tmp_path / "test.sh"
  test.write_bytes(task.tests.files[0].data)
  env = {"AGENTRL_WORKSPACE": str(ws), "LOGS_DIR": str(logs), "PATH": "/usr/bin:/bin"}
  subprocess.run(["bash", str(test)], env=env, capture_output=True, check=False)
  return float((logs / "reward.txt").read_text())
