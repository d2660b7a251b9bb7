"""envs/procedural_notes.py: each note family's test.sh passes the reference act and fails the
sloppy ones (the act on a file the note does not name, a distractor lost, no act), run by bash
over the task's files in a temp folder (the grader's contract: $AGENTRL_WORKSPACE, $LOGS_DIR)."""

import pytest
from shell_grade import reward

from envs import procedural


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
    assert reward(tmp_path / fam / "ref", task, [task.solution_script]) == 1.0, fam
    for i, cmd in enumerate(wrong):
      assert reward(tmp_path / fam / f"w{i}", task, [cmd.format(**fill)]) == 0.0, (fam, cmd)
