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


def note_copy(rng: random.Random, seed: int) -> Task:
  names, files = _files(rng, (2, 4))
  src, dst = f"{names[0]}.txt", f"{pseudo_word(rng)}.txt"
  files.append(("note.txt", f"Copy the file {src} to a new file named {dst}.\n".encode()))
  return make_task(
    "note_copy", seed, "file_ops", 2, _INSTRUCTION, f"cp {src} {dst}", "", files,
    shell=grade_script(f"cmp -s {src} {dst} && {_kept(files)}"),
  )  # fmt: skip


def note_delete(rng: random.Random, seed: int) -> Task:
  names, files = _files(rng, (3, 5))
  gone = f"{names[rng.randrange(len(names))]}.txt"
  files.append(("note.txt", f"Delete the file {gone} and nothing else.\n".encode()))
  return make_task(
    "note_delete", seed, "file_ops", 2, _INSTRUCTION, f"rm {gone}", "", files,
    shell=grade_script(f"[ ! -e {gone} ] && {_kept(files, gone)}"),
  )  # fmt: skip


def note_rename(rng: random.Random, seed: int) -> Task:
  names, files = _files(rng, (2, 4))
  src, dst = f"{names[0]}.txt", f"{pseudo_word(rng)}.txt"
  data = dict(files)[src].decode().strip()
  files.append(("note.txt", f"Rename the file {src} to {dst}.\n".encode()))
  return make_task(
    "note_rename", seed, "file_ops", 2, _INSTRUCTION, f"mv {src} {dst}", "", files,
    shell=grade_script(f"[ ! -e {src} ] && {holds(dst, data)} && {_kept(files, src)}"),
  )  # fmt: skip


def note_mkdir(rng: random.Random, seed: int) -> Task:
  names, files = _files(rng, (2, 4))
  src, folder = f"{names[0]}.txt", pseudo_word(rng)
  data = dict(files)[src].decode().strip()
  files.append(("note.txt", f"Make a folder named {folder} and move {src} into it.\n".encode()))
  return make_task(
    "note_mkdir", seed, "file_ops", 2, _INSTRUCTION, f"mkdir -p {folder} && mv {src} {folder}/",
    "", files,
    shell=grade_script(f"[ ! -e {src} ] && {holds(f'{folder}/{src}', data)} && {_kept(files, src)}"),
  )  # fmt: skip


FAMILIES = {f.__name__: f for f in (note_copy, note_delete, note_rename, note_mkdir)}
