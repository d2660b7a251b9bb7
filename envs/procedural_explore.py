"""Procedural families whose right command depends on what the agent reads in the sandbox first.

The instruction never names the answer: the agent must look (`cat`, `ls`, `grep`) and then act
on what it saw, so a policy that only learnt to copy words from the instruction (the format
families' warm start, configs/smollm2_nodemo.py) fails them until it learns to explore.

  read_note     (file_ops, 2)  note.txt names a word and a file; write the word into the file
  find_ext      (file_ops, 2)  the one .key file in box/: its base name into answer.txt
  find_word     (text, 2)      the one file in notes/ holding a given word: its name into
                               answer.txt (with or without the notes/ prefix)
  copy_pointer  (file_ops, 2)  pointer.txt holds a path under data/; copy that file to copy.txt

Two look-then-act format families carry a two-turn demonstration (`demo_actions`: look, then a
command built from what the look showed), for a warm start that teaches the looking protocol on
tasks unlike the ones above (configs/smollm2_nodemo.py's D):
  peek_twice    (text, 1)      a named file holds a word; write it twice to another named file
  move_only     (file_ops, 1)  a named folder holds one file; move it into another named folder
(the names vary per task, so a demonstration teaches "look at what the instruction names, then
use what you saw", not one fixed command).

Each is graded by a test.sh (one file compared: no pytest start-up).
"""

from __future__ import annotations

import random
import textwrap

from envs.procedural_kit import distinct_words, make_task, one_file_folder, pseudo_word
from envs.task import Task

_EXTS = ("txt", "dat", "log", "csv", "md", "ini")


def grade_script(check: str) -> str:
  """A test.sh: reward 0, then 1 if the bash condition `check` holds in the workspace."""
  return textwrap.dedent(f"""\
    #!/bin/bash
    cd "$AGENTRL_WORKSPACE" || exit 1
    echo 0 > "$LOGS_DIR/reward.txt"
    if {check}; then echo 1 > "$LOGS_DIR/reward.txt"; else echo "wrong or missing answer"; exit 1; fi
  """)


def holds(path: str, *answers: str) -> str:
  """Bash: `path` holds one of `answers`, with or without a trailing newline."""
  alts = " || ".join(
    f"printf '{a}' | cmp -s - {path} || printf '{a}\\n' | cmp -s - {path}" for a in answers
  )
  return f"[ -f {path} ] && {{ {alts}; }}"


def read_note(rng: random.Random, seed: int) -> Task:
  word, name = pseudo_word(rng), pseudo_word(rng)
  note = f"Write the word {word} into a file named {name}.txt.\n"
  return make_task(
    "read_note",
    seed,
    "file_ops",
    2,
    "The file note.txt says which word to write into which file. Read it and do what it says.",
    f"echo {word} > {name}.txt",
    "",
    [("note.txt", note.encode())],
    shell=grade_script(holds(f"{name}.txt", word)),
  )


def find_ext(rng: random.Random, seed: int) -> Task:
  names = distinct_words(rng, rng.randint(4, 7))
  files = [(f"box/{n}.{rng.choice(_EXTS)}", f"{n}\n".encode()) for n in names[1:]]
  files.insert(rng.randrange(len(files) + 1), (f"box/{names[0]}.key", b"key\n"))
  return make_task(
    "find_ext",
    seed,
    "file_ops",
    2,
    "Exactly one file in the folder box/ has the extension .key. Write its name without the "
    "extension to answer.txt.",
    "basename box/*.key .key > answer.txt",
    "",
    files,
    shell=grade_script(holds("answer.txt", names[0])),
  )


def find_word(rng: random.Random, seed: int) -> Task:
  names, vocab = distinct_words(rng, rng.randint(3, 6)), distinct_words(rng, 12)
  magic = vocab.pop()
  hit = rng.randrange(len(names))
  files = []
  for i, n in enumerate(names):
    words = rng.sample(vocab, 4) + ([magic] if i == hit else [])
    rng.shuffle(words)
    files.append((f"notes/{n}.txt", (" ".join(words) + "\n").encode()))
  answer = f"{names[hit]}.txt"
  return make_task(
    "find_word",
    seed,
    "text",
    2,
    f"Exactly one file in the folder notes/ contains the word {magic}. Write the name of that "
    "file to answer.txt.",
    f"grep -l {magic} notes/* | xargs -n1 basename > answer.txt",
    "",
    files,
    shell=grade_script(holds("answer.txt", answer, f"notes/{answer}")),
  )


def copy_pointer(rng: random.Random, seed: int) -> Task:
  names = distinct_words(rng, rng.randint(3, 6))
  files = [(f"data/{n}.txt", f"{pseudo_word(rng)} {i}\n".encode()) for i, n in enumerate(names)]
  target = rng.choice(files)[0]
  files.append(("pointer.txt", f"{target}\n".encode()))
  return make_task(
    "copy_pointer",
    seed,
    "file_ops",
    2,
    "The file pointer.txt holds the path of another file. Copy that file to copy.txt.",
    f"cp {target} copy.txt",
    "",
    files,
    shell=grade_script(f"cmp -s {target} copy.txt"),
  )


def peek_twice(rng: random.Random, seed: int) -> Task:
  word, src, out = pseudo_word(rng), *distinct_words(rng, 2)
  src, out = f"{src}.{rng.choice(_EXTS)}", f"{out}.txt"
  return make_task(
    "peek_twice",
    seed,
    "text",
    1,
    f"The file {src} holds one word. Write that word twice, separated by one space, to {out}.",
    f'w=$(cat {src}); echo "$w $w" > {out}',
    "",
    [(src, f"{word}\n".encode())],
    shell=grade_script(holds(out, f"{word} {word}")),
    demo=(f"cat {src}", f"echo {word} {word} > {out}"),
  )


def move_only(rng: random.Random, seed: int) -> Task:
  src, dst, path, data = one_file_folder(rng, _EXTS)
  name = path.split("/", 1)[1]
  return make_task(
    "move_only",
    seed,
    "file_ops",
    1,
    f"The folder {src}/ holds exactly one file. Move it into a new folder named {dst}/.",
    f"mkdir -p {dst} && mv {src}/* {dst}/",
    "",
    [(f"{src}/{name}", data.encode())],
    shell=grade_script(f"[ ! -e {src}/{name} ] && {holds(f'{dst}/{name}', data.strip())}"),
    demo=(f"ls {src}", f"mkdir -p {dst} && mv {src}/{name} {dst}/"),
  )


FAMILIES = {
  f.__name__: f for f in (read_note, find_ext, find_word, copy_pointer, peek_twice, move_only)
}
