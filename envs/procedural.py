"""Seeded generators of fresh training tasks, each with a reference solution and hidden tests.

`generate(family, seed)` is deterministic; `stream(seed)` yields tasks forever. Families:

  echo_word     (file_ops, 1)  Create a file named <name>.txt containing exactly the word <word>.
                               One command solves it (`echo <word> > <name>.txt`) and the
                               instruction never varies but for the two words: a tiny byte-level
                               model learns it on a CPU in minutes (the demo's family).
                               Graded by a test.sh (one file compared); its tasks carry
                               `teacher_mistakes` for a noisy warm-start teacher.
  sort_unique   (text, 2)      distinct sorted lines of a generated word list
  count_level   (text, 2)      count log lines of one level
  rename_ext    (file_ops, 2)  rename one extension to another in a folder
  json_select   (data, 2)      names of the records matching a field, with jq
  csv_sum       (data, 3)      sum a CSV column over the rows of one group
  python_fix    (python_bugfix, 3)  fix one injected bug in a small function

and the observation-dependent families of envs/procedural_explore.py (read_note, find_ext,
find_word, copy_pointer) and envs/procedural_notes.py (note_copy, note_delete, note_rename,
note_mkdir), and the primitive-act format families of envs/procedural_acts.py (copy_one,
delete_ext, rename_one, strip_ext, find_line). Helpers for new families:
envs/procedural_kit.py.
"""

from __future__ import annotations

import json
import random
import textwrap
from collections.abc import Callable, Iterator, Sequence

from envs import procedural_acts, procedural_explore, procedural_notes
from envs.procedural_kit import distinct_words, make_task, pseudo_word, unchanged_test
from envs.task import Task


def echo_word(rng: random.Random, seed: int) -> Task:
  name, word = pseudo_word(rng), pseudo_word(rng)
  # A test.sh, not pytest: one file comparison, graded ~10x faster than starting pytest.
  # The file holds exactly the word, with or without one trailing newline.
  shell = textwrap.dedent(f"""\
    #!/bin/bash
    f="$AGENTRL_WORKSPACE/{name}.txt"
    echo 0 > "$LOGS_DIR/reward.txt"
    if [ ! -f "$f" ]; then
      echo "{name}.txt is missing"; exit 1
    fi
    if ! {{ printf '{word}' | cmp -s - "$f" || printf '{word}\\n' | cmp -s - "$f"; }}; then
      echo "{name}.txt does not hold exactly {word}"; exit 1
    fi
    echo 1 > "$LOGS_DIR/reward.txt"
  """)
  return make_task(
    "echo_word",
    seed,
    "file_ops",
    1,
    f"Create a file named {name}.txt containing exactly the word {word}.",
    f"echo {word} > {name}.txt",
    "",
    shell=shell,
    # The noisy teacher's habit: the right word in a file of the wrong type. Its commands
    # keep the reference's shape, so copying the two words is learnt as from the reference.
    mistakes=(
      f"echo {word} > {name}.md",
      f"echo {word} > {name}.log",
      f"echo {word} > {name}.text",
    ),
  )


def sort_unique(rng: random.Random, seed: int) -> Task:
  vocab = distinct_words(rng, rng.randint(5, 9))
  lines = [rng.choice(vocab) for _ in range(rng.randint(12, 30))]
  data = ("\n".join(lines) + "\n").encode()
  expect = "\n".join(sorted(set(lines))) + "\n"
  tests = textwrap.dedent(f"""
  def test_sorted_unique():
    assert (WS / "sorted.txt").read_text() == {expect!r}
  """) + unchanged_test("words.txt", data)
  return make_task(
    "sort_unique",
    seed,
    "text",
    2,
    "Write the distinct lines of words.txt, sorted alphabetically, one per line, to sorted.txt.",
    "LC_ALL=C sort -u words.txt > sorted.txt",
    tests,
    [("words.txt", data)],
  )


def count_level(rng: random.Random, seed: int) -> Task:
  levels = ["INFO", "WARN", "ERROR", "DEBUG"]
  rows = [
    f"2024-03-{rng.randint(1, 28):02d} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} {rng.choice(levels)} {pseudo_word(rng)} {pseudo_word(rng)}"
    for _ in range(rng.randint(15, 40))
  ]
  level = rng.choice(levels)
  data = ("\n".join(rows) + "\n").encode()
  n = sum(r.split()[2] == level for r in rows)
  tests = textwrap.dedent(f"""
  def test_count():
    assert (WS / "count.txt").read_text().strip() == "{n}"
  """) + unchanged_test("app.log", data)
  return make_task(
    "count_level",
    seed,
    "text",
    2,
    f"Count the lines of app.log whose level (third field) is {level} and write the number to count.txt.",
    f"awk '$3 == \"{level}\"' app.log | wc -l > count.txt",
    tests,
    [("app.log", data)],
  )


def rename_ext(rng: random.Random, seed: int) -> Task:
  src, dst = rng.sample(["txt", "log", "dat", "csv", "md"], 2)
  other = next(e for e in ["txt", "log", "dat", "csv", "md", "ini"] if e not in (src, dst))
  names = distinct_words(rng, rng.randint(4, 8))
  files = [
    (f"docs/{n}.{src if i % 3 else other}", f"{n} {i}\n".encode()) for i, n in enumerate(names)
  ]
  expect = sorted(
    (p.rsplit(".", 1)[0] + f".{dst}" if p.endswith("." + src) else p)[5:] for p, _ in files
  )
  contents = {
    (p.rsplit(".", 1)[0] + f".{dst}" if p.endswith("." + src) else p)[5:]: d for p, d in files
  }
  tests = textwrap.dedent(f"""
  def test_names():
    assert sorted(p.name for p in (WS / "docs").iterdir()) == {expect!r}

  def test_contents_kept():
    for name, data in {contents!r}.items():
      assert (WS / "docs" / name).read_bytes() == data
  """)
  return make_task(
    "rename_ext",
    seed,
    "file_ops",
    2,
    f"In the folder docs/, rename every .{src} file so that its extension is .{dst} (keep the base name). Leave the other files as they are.",
    f'cd docs && for f in *.{src}; do mv "$f" "${{f%.{src}}}.{dst}"; done',
    tests,
    files,
  )


def json_select(rng: random.Random, seed: int) -> Task:
  cities = distinct_words(rng, 3)
  recs = [
    {"name": n.capitalize(), "age": rng.randint(18, 80), "city": rng.choice(cities)}
    for n in distinct_words(rng, rng.randint(6, 12))
  ]
  city = rng.choice([r["city"] for r in recs])
  data = (json.dumps(recs, indent=2) + "\n").encode()
  expect = "".join(r["name"] + "\n" for r in recs if r["city"] == city)
  tests = textwrap.dedent(f"""
  def test_names():
    assert (WS / "names.txt").read_text() == {expect!r}
  """) + unchanged_test("people.json", data)
  return make_task(
    "json_select",
    seed,
    "data",
    2,
    f'Write the "name" of every record in people.json whose "city" is "{city}", one per line in file order, to names.txt.',
    f"jq -r '.[] | select(.city == \"{city}\") | .name' people.json > names.txt",
    tests,
    [("people.json", data)],
  )


def csv_sum(rng: random.Random, seed: int) -> Task:
  regions, products = distinct_words(rng, 4), distinct_words(rng, 5)
  rows = [
    (rng.choice(regions), rng.choice(products), rng.randint(1, 500))
    for _ in range(rng.randint(15, 40))
  ]
  region = rng.choice([r[0] for r in rows])
  data = ("region,product,units\n" + "".join(f"{a},{b},{c}\n" for a, b, c in rows)).encode()
  total = sum(c for a, _, c in rows if a == region)
  tests = textwrap.dedent(f"""
  def test_total():
    assert (WS / "total.txt").read_text().strip() == "{total}"
  """) + unchanged_test("sales.csv", data)
  return make_task(
    "csv_sum",
    seed,
    "data",
    3,
    f"sales.csv has the columns region,product,units. Write the total units of region {region} (an integer) to total.txt.",
    f"awk -F, -v r={region} 'NR > 1 && $1 == r {{ s += $3 }} END {{ print s + 0 }}' sales.csv > total.txt",
    tests,
    [("sales.csv", data)],
  )


# (spec, correct body, buggy body, reference implementation); bodies take the argument `xs`/`s`/`n`.
_FUNCS: tuple[tuple[str, str, str, str, Callable], ...] = (
  (
    "returns the sum of the list xs",
    "xs",
    "  return sum(xs)\n",
    "  t = 0\n  for x in xs[1:]:\n    t += x\n  return t\n",
    sum,
  ),
  (
    "returns the largest element of the non-empty list xs",
    "xs",
    "  m = xs[0]\n  for x in xs:\n    if x > m:\n      m = x\n  return m\n",
    "  m = 0\n  for x in xs:\n    if x > m:\n      m = x\n  return m\n",
    max,
  ),
  (
    "returns how many vowels (a, e, i, o, u) the string s has",
    "s",
    "  return sum(c in 'aeiou' for c in s.lower())\n",
    "  return sum(c in 'aeio' for c in s.lower())\n",
    lambda s: sum(c in "aeiou" for c in s.lower()),
  ),
  (
    "returns n! for an integer n >= 0",
    "n",
    "  r = 1\n  for i in range(2, n + 1):\n    r *= i\n  return r\n",
    "  r = 1\n  for i in range(2, n):\n    r *= i\n  return r\n",
    lambda n: __import__("math").factorial(n),
  ),
  (
    "returns the words of s in reverse order, joined by single spaces",
    "s",
    "  return ' '.join(s.split()[::-1])\n",
    "  return ' '.join(s.split()[::1])\n",
    lambda s: " ".join(s.split()[::-1]),
  ),
  (
    "returns the list xs without its negative numbers, order kept",
    "xs",
    "  return [x for x in xs if x >= 0]\n",
    "  return [x for x in xs if x > 0]\n",
    lambda xs: [x for x in xs if x >= 0],
  ),
)


def _inputs(rng: random.Random, arg: str, k: int) -> list:
  if arg == "xs":
    return [[rng.randint(-20, 20) for _ in range(rng.randint(1, 7))] for _ in range(k)] + [
      [-5, -3, -9],
      [0, 4, 0],
    ]
  if arg == "s":
    return [" ".join(pseudo_word(rng) for _ in range(rng.randint(1, 4))) for _ in range(k)] + [
      "Queue UP"
    ]
  return [rng.randint(0, 9) for _ in range(k)] + [0, 1, 5]


def python_fix(rng: random.Random, seed: int) -> Task:
  spec, arg, good, bad, ref = rng.choice(_FUNCS)
  fn, mod = pseudo_word(rng), pseudo_word(rng)
  cases = [(x, ref(x)) for x in _inputs(rng, arg, 6)]
  src = f'def {fn}({arg}):\n  """{spec[0].upper() + spec[1:]}."""\n'
  tests = textwrap.dedent(f"""
  import subprocess
  import sys

  def test_cases():
    code = "import json, sys; sys.path.insert(0, '.'); import {mod}; print(json.dumps([{mod}.{fn}(x) for x in {[c[0] for c in cases]!r}]))"
    out = subprocess.run([sys.executable, "-c", code], cwd=WS, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == {json.dumps([c[1] for c in cases])!r}
  """)
  return make_task(
    "python_fix",
    seed,
    "python_bugfix",
    3,
    f"The function {fn} in {mod}.py should be the function that {spec}, but it has a bug. Fix the bug without renaming the function.",
    f"cat > {mod}.py <<'EOF'\n{src}{good}EOF",
    tests,
    [(f"{mod}.py", (src + bad).encode())],
  )


FAMILIES: dict[str, Callable[[random.Random, int], Task]] = (
  {
    f.__name__: f
    for f in (echo_word, sort_unique, count_level, rename_ext, json_select, csv_sum, python_fix)
  }
  | procedural_explore.FAMILIES
  | procedural_notes.FAMILIES
  | procedural_acts.FAMILIES
)


def family(task_id: str) -> str:
  """The procedural family of a task id (`procedural/echo_word-3` -> echo_word), else its suite."""
  head, _, name = task_id.partition("/")
  return name.rsplit("-", 1)[0] if head == "procedural" else head


def generate(family: str, seed: int) -> Task:
  """One task of `family`, a pure function of (family, seed)."""
  if family not in FAMILIES:
    raise KeyError(f"unknown procedural family {family!r} (known: {', '.join(FAMILIES)})")
  return FAMILIES[family](random.Random(f"{family}:{seed}"), seed)


def sample(n: int, seed: int = 0, families: Sequence[str] | None = None) -> list[Task]:
  """n tasks cycling over `families` with seeds derived from `seed`."""
  fams = list(families or FAMILIES)
  return [generate(fams[i % len(fams)], seed * 1_000_003 + i) for i in range(n)]


def stream(seed: int = 0, families: Sequence[str] | None = None) -> Iterator[Task]:
  """An endless stream of fresh tasks (families drawn uniformly, seeded)."""
  fams = list(families or FAMILIES)
  rng = random.Random(seed)
  i = 0
  while True:
    yield generate(rng.choice(fams), seed * 1_000_003 + i)
    i += 1
