"""Building blocks of procedural task families (envs/procedural.py, envs/procedural_explore.py)."""

from __future__ import annotations

import random

from envs.agents.tool_format import format_tool_call
from envs.task import FileEntry, Task, TestSpec

_CONS, _VOWELS = "bdfgklmnprstvz", "aeiou"
TEST_HEADER = 'import os\nimport pathlib\n\nWS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))\n\n'


def pseudo_word(rng: random.Random, syllables: tuple[int, int] = (2, 3)) -> str:
  return "".join(rng.choice(_CONS) + rng.choice(_VOWELS) for _ in range(rng.randint(*syllables)))


def distinct_words(rng: random.Random, k: int) -> list[str]:
  out: list[str] = []
  while len(out) < k:
    w = pseudo_word(rng)
    if w not in out:
      out.append(w)
  return out


def one_file_folder(rng: random.Random, exts) -> tuple[str, str, str, str]:
  """A folder holding one file, and one more name: (folder, other name, file path, its data
  with a newline); the file is <word>.<one of exts> holding one pseudo-word."""
  folder, other, base = distinct_words(rng, 3)
  path, data = f"{folder}/{base}.{rng.choice(exts)}", f"{pseudo_word(rng)}\n"
  return folder, other, path, data


def unchanged_test(name: str, data: bytes) -> str:
  return f"\n\ndef test_{name.replace('.', '_').replace('/', '_')}_unchanged():\n  assert (WS / {name!r}).read_bytes() == {data!r}\n"


def make_task(
  family, seed, domain, difficulty, instruction, solution, tests, files=(), mistakes=(), shell="",
  demo=(),
) -> Task:  # fmt: skip
  """`tests`: a pytest body (test_task.py), or `shell`: a test.sh (runner `shell`) instead.

  `mistakes`: plausible wrong commands, the noisy teacher's (rl.warm_start.demonstrations).
  `demo`: the teacher's shell commands, one per turn, when the demonstration is not the one-line
  `solution` (a look-then-act demonstration: its second command uses what the first showed).
  """
  if shell:
    spec = TestSpec((FileEntry("test.sh", shell.encode(), 0o755),), runner="shell")
  else:
    spec = TestSpec((FileEntry("test_task.py", (TEST_HEADER + tests).encode()),))
  return Task(
    id=f"procedural/{family}-{seed}",
    instruction=instruction,
    domain=domain,
    difficulty=difficulty,
    tests=spec,
    solution_script=solution + "\n",
    workspace_files=tuple(FileEntry(p, d) for p, d in files),
    tags=("procedural", family),
    agent_timeout_s=120.0,
    test_timeout_s=60.0,
    source=f"procedural:{family}:{seed}",
    format="procedural",
    metadata=(
      *((("teacher_mistakes", tuple(mistakes)),) if mistakes else ()),
      *((("demo_actions", demo_actions(demo)),) if demo else ()),
    ),
  )


def demo_actions(commands) -> tuple[str, ...]:
  """A demonstration as tool calls: a shell call per command, then `finish`."""
  return (*(format_tool_call("shell", command=c) for c in commands), format_tool_call("finish"))
