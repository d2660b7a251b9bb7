"""Note-driven procedural families: note.txt says what to do with which file; the agent reads
it, then acts (two turns). The instruction never names the files, so the right command depends
on what the agent reads first (envs/procedural_explore.py's read_note is the first of these).

  note_copy     (file_ops, 2)  copy the file the note names to the name it gives
  note_delete   (file_ops, 2)  delete the one file the note names, keep the others
  note_rename   (file_ops, 2)  rename the file the note names to the name it gives
  note_mkdir    (file_ops, 2)  make the folder the note names and move the file it names into it

Each is graded by a test.sh (no pytest start-up); the distractor files must survive.
"""

from __future__ import annotations

import random

from envs.procedural_explore import grade_script, holds
from envs.procedural_kit import distinct_words, make_task, pseudo_word
from envs.task import Task

_INSTRUCTION = "The file note.txt says what to do. Read it and do what it says."


def _files(rng: random.Random, k: tuple[int, int]) -> tuple[list[str], list[tuple[str, bytes]]]:
  names = distinct_words(rng, rng.randint(*k))
  return names, [(f"{n}.txt", f"{pseudo_word(rng)}\n".encode()) for n in names]


def _kept(files, *skip: str) -> str:
  """Bash: every file of `files` but `skip` still holds its content."""
  return " && ".join(holds(p, d.decode().strip()) for p, d in files if p not in skip) or "true"


def _note_task(family, seed, files, note: str, solution: str, check: str, *moved: str) -> Task:
  """A note task: note.txt says `note`; graded by `check` and every other file (note.txt too)
  kept but the `moved` ones."""
  files.append(("note.txt", f"{note}\n".encode()))
  return make_task(
    family, seed, "file_ops", 2, _INSTRUCTION, solution, "", files,
    shell=grade_script(f"{check} && {_kept(files, *moved)}"),
  )  # fmt: skip


def note_copy(rng: random.Random, seed: int) -> Task:
  names, files = _files(rng, (2, 4))
  src, dst = f"{names[0]}.txt", f"{pseudo_word(rng)}.txt"
  note = f"Copy the file {src} to a new file named {dst}."
  return _note_task("note_copy", seed, files, note, f"cp {src} {dst}", f"cmp -s {src} {dst}")


def note_delete(rng: random.Random, seed: int) -> Task:
  names, files = _files(rng, (3, 5))
  gone = f"{names[rng.randrange(len(names))]}.txt"
  note = f"Delete the file {gone} and nothing else."
  return _note_task("note_delete", seed, files, note, f"rm {gone}", f"[ ! -e {gone} ]", gone)


def note_rename(rng: random.Random, seed: int) -> Task:
  names, files = _files(rng, (2, 4))
  src, dst = f"{names[0]}.txt", f"{pseudo_word(rng)}.txt"
  check = f"[ ! -e {src} ] && {holds(dst, dict(files)[src].decode().strip())}"
  note = f"Rename the file {src} to {dst}."
  return _note_task("note_rename", seed, files, note, f"mv {src} {dst}", check, src)


def note_mkdir(rng: random.Random, seed: int) -> Task:
  names, files = _files(rng, (2, 4))
  src, folder = f"{names[0]}.txt", pseudo_word(rng)
  check = f"[ ! -e {src} ] && {holds(f'{folder}/{src}', dict(files)[src].decode().strip())}"
  note = f"Make a folder named {folder} and move {src} into it."
  solution = f"mkdir -p {folder} && mv {src} {folder}/"
  return _note_task("note_mkdir", seed, files, note, solution, check, src)


FAMILIES = {f.__name__: f for f in (note_copy, note_delete, note_rename, note_mkdir)}
