"""Format families that demonstrate the primitive acts (cp, rm, mv, stripping an extension, grep)
on tasks unlike the no-demonstration ones (configs/smollm2_nodemo_acts.py's D).

The first no-demonstration comparison (configs/smollm2_nodemo.py, docs/results/nodemo.md) found
that its warm start had never seen `cp`, `rm`, a rename, an extension stripped or `grep`: it
never solved find_ext or find_word (0 of 128 samples at temperature 1), so RL had no success to
reinforce there, and it read the note families' note.txt after RL but did not know their acts.
These families show each act once, in a look-then-act demonstration where the look matters:

  copy_one    (file_ops, 1)  a named folder holds one file; copy it to a named file
  delete_ext  (file_ops, 1)  a named folder holds one file of a named extension among others;
                             delete it, keep the others
  rename_one  (file_ops, 1)  a named folder holds one file; rename it (same folder) to a name
  strip_ext   (text, 1)      a named file holds a file name; write it without its extension
  find_line   (text, 1)      one line of a named file holds a word; write that line to a file

None reads a note, looks for an extension to write out, or searches several files for a word:
those compositions stay N's and U's (envs/procedural_explore.py, envs/procedural_notes.py).
Each is graded by a test.sh (envs/procedural_explore.grade_script).
"""

from __future__ import annotations

import random

from envs.procedural_explore import grade_script, holds
from envs.procedural_kit import distinct_words, make_task, one_file_folder
from envs.task import Task

_EXTS = ("txt", "dat", "log", "csv", "md", "ini")  # never .key: find_ext's extension


def copy_one(rng: random.Random, seed: int) -> Task:
  folder, dst, src, data = one_file_folder(rng, _EXTS)
  return make_task(
    "copy_one",
    seed,
    "file_ops",
    1,
    f"The folder {folder}/ holds exactly one file. Copy it to a new file named {dst}.txt and "
    "keep the original.",
    f"cp {folder}/* {dst}.txt",
    "",
    [(src, data.encode())],
    shell=grade_script(f"{holds(src, data.strip())} && cmp -s {src} {dst}.txt"),
    demo=(f"ls {folder}", f"cp {src} {dst}.txt"),
  )


def delete_ext(rng: random.Random, seed: int) -> Task:
  folder, *names = distinct_words(rng, rng.randint(4, 6))
  ext, *others = rng.sample(_EXTS, 3)
  files = [(f"{folder}/{n}.{rng.choice(others)}", f"{n}\n".encode()) for n in names[1:]]
  gone = f"{folder}/{names[0]}.{ext}"
  files.insert(rng.randrange(len(files) + 1), (gone, f"{names[0]}\n".encode()))
  kept = " && ".join(holds(p, d.decode().strip()) for p, d in files if p != gone)
  return make_task(
    "delete_ext",
    seed,
    "file_ops",
    1,
    f"Exactly one file in the folder {folder}/ has the extension .{ext}. Delete that file and "
    "keep the others.",
    f"rm {folder}/*.{ext}",
    "",
    files,
    shell=grade_script(f"[ ! -e {gone} ] && {kept}"),
    demo=(f"ls {folder}", f"rm {gone}"),
  )


def rename_one(rng: random.Random, seed: int) -> Task:
  folder, new, src, data = one_file_folder(rng, _EXTS)
  dst = f"{folder}/{new}.txt"
  return make_task(
    "rename_one",
    seed,
    "file_ops",
    1,
    f"The folder {folder}/ holds exactly one file. Rename it to {new}.txt in the same folder.",
    f"mv {folder}/* {dst}",
    "",
    [(src, data.encode())],
    shell=grade_script(f"[ ! -e {src} ] && {holds(dst, data.strip())}"),
    demo=(f"ls {folder}", f"mv {src} {dst}"),
  )


def strip_ext(rng: random.Random, seed: int) -> Task:
  holder, out, base = distinct_words(rng, 3)
  name = f"{base}.{rng.choice(_EXTS)}"
  return make_task(
    "strip_ext",
    seed,
    "text",
    1,
    f"The file {holder}.txt holds the name of a file. Write that name without its extension to "
    f"{out}.txt.",
    f"basename $(cat {holder}.txt) .{name.rsplit('.', 1)[1]} > {out}.txt",
    "",
    [(f"{holder}.txt", f"{name}\n".encode())],
    shell=grade_script(holds(f"{out}.txt", base)),
    demo=(f"cat {holder}.txt", f"echo {base} > {out}.txt"),
  )


def find_line(rng: random.Random, seed: int) -> Task:
  log, out = distinct_words(rng, 2)
  vocab = distinct_words(rng, 10)
  magic = vocab.pop()
  lines = [" ".join(rng.sample(vocab, 3)) for _ in range(rng.randint(3, 6))]
  hit = rng.randrange(len(lines))
  words = lines[hit].split() + [magic]
  rng.shuffle(words)
  lines[hit] = " ".join(words)
  return make_task(
    "find_line",
    seed,
    "text",
    1,
    f"Exactly one line of {log}.log contains the word {magic}. Write that line to {out}.txt.",
    f"grep {magic} {log}.log > {out}.txt",
    "",
    [(f"{log}.log", ("\n".join(lines) + "\n").encode())],
    shell=grade_script(holds(f"{out}.txt", lines[hit])),
    demo=(f"grep {magic} {log}.log > {out}.txt",),
  )


FAMILIES = {f.__name__: f for f in (copy_one, delete_ext, rename_one, strip_ext, find_line)}
