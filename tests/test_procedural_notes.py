"""envs/procedural_notes.py: each note family's test.sh passes the reference act and fails the
sloppy ones (the act on a file the note does not name, a distractor lost, no act), run by bash
over the task's files in a temp folder (the grader's contract: $AGENTRL_WORKSPACE, $LOGS_DIR)."""

import subprocess

import pytest

from envs import procedural


def _reward(tmp_path, task, command: str) -> float:
  ws, logs = tmp_path / "ws", tmp_path / "logs"
  ws.mkdir(parents=True)
  logs.mkdir()
  for f in task.workspace_files:
    (ws / f.path).parent.mkdir(parents=True, exist_ok=True)
    (ws / f.path).write_bytes(f.data)
  subprocess.run(["bash", "-c", command], cwd=ws, check=False)
  test = tmp_path / "test.sh"
  test.write_bytes(task.tests.files[0].data)
  env = {"AGENTRL_WORKSPACE": str(ws), "LOGS_DIR": str(logs), "PATH": "/usr/bin:/bin"}
  subprocess.run(["bash", str(test)], env=env, capture_output=True, check=False)
  return float((logs / "reward.txt").read_text())


def _note(task) -> str:
  return dict((f.path, f.data.decode()) for f in task.workspace_files)["note.txt"]


@pytest.mark.parametrize("seed", [0, 1])
def test_note_families_grade_the_act_the_note_names(tmp_path, seed):
  cases = {
    "note_copy": ["rm -f note.txt; for f in *.txt; do cp $f copy-$f; done", "true"],
    "note_delete": ["rm -f *.txt", "rm -f $(ls *.txt | grep -v note | head -n 99 | tail -n 1)x"],
    "note_rename": ["true", "cp {src} {dst}"],
    "note_mkdir": ["mkdir -p {dir}", "mkdir -p {dir} && cp {src} {dir}/"],
  }
  for fam, wrong in cases.items():
    task = procedural.generate(fam, seed)
    words = _note(task).rstrip(".\n").split()
    assert task.instruction == "The file note.txt says what to do. Read it and do what it says."
    assert not any(w in task.instruction for w in words if w.endswith(".txt") and w != "note.txt")
    mkdir = fam == "note_mkdir"
    fill = {"src": words[7 if mkdir else 3], "dst": words[-1], "dir": words[4]}
    assert _reward(tmp_path / fam / "ref", task, task.solution_script) == 1.0, fam
    for i, cmd in enumerate(wrong):
      assert _reward(tmp_path / fam / f"w{i}", task, cmd.format(**fill)) == 0.0, (fam, cmd)
