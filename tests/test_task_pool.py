"""Task pool: mixing weights, learnable-band focus, online strata, quarantine, state, decontamination."""

import collections
import json
import math

import pytest

from envs import procedural
from envs.grading.quality import Quarantine
from envs.task import Task, TestSpec
from envs.task_pool import (
  PoolConfig,
  TaskPool,
  decontaminate,
  ngrams,
  overlap,
  write_decontamination_report,
)


def mk(
  tid: str,
  domain: str = "text",
  difficulty: int = 3,
  instruction: str | None = None,
  solution: str | None = None,
) -> Task:
  return Task(
    id=tid,
    instruction=instruction or f"instruction of {tid}",
    domain=domain,
    difficulty=difficulty,
    tests=TestSpec(),
    solution_script=solution or f"echo {tid}",
  )


def within(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
  """|count - np| <= sigmas * sd of Binomial(n, p) (fixed seed: a deterministic check)."""
  return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p)) + 1e-9


def test_domain_frequencies_match_weights():
  tasks = [mk(f"a{i}", "text") for i in range(3)] + [mk(f"b{i}", "git") for i in range(7)]
  tasks += [mk(f"c{i}", "data") for i in range(2)] + [mk("d0", "build")]
  weights = (("text", 0.5), ("git", 0.3), ("data", 0.2), ("build", 0.0))
  pool = TaskPool(tasks, PoolConfig(seed=1, domain_weights=weights))
  n = 20000
  counts = collections.Counter(pool.sample().domain for _ in range(n))
  assert counts["build"] == 0
  for d, w in weights[:3]:
    assert within(counts[d], n, w), (d, counts[d], n * w)
  # Within a domain (no observations yet: all in band) tasks are uniform.
  per_task = collections.Counter()
  pool2 = TaskPool(tasks, PoolConfig(seed=2, domain_weights=weights))
  for _ in range(n):
    t = pool2.sample()
    if t.domain == "git":
      per_task[t.id] += 1
  m = sum(per_task.values())
  assert all(within(c, m, 1 / 7) for c in per_task.values())


def test_uniform_domains_by_default_and_renormalised_after_quarantine(tmp_path):
  tasks = [mk("x1", "text"), mk("x2", "text"), mk("y1", "git"), mk("z1", "data")]
  q = Quarantine(tmp_path / "q.json")
  pool = TaskPool(tasks, PoolConfig(seed=0, quarantine_path=str(q.path)))
  n = 9000
  counts = collections.Counter(pool.sample().domain for _ in range(n))
  assert all(within(counts[d], n, 1 / 3) for d in ("text", "git", "data"))
  q.add("z1", "bad tests", source="gate")
  seen = collections.Counter(pool.sample().id for _ in range(n))
  assert "z1" not in seen  # quarantine honoured as soon as the file changes
  assert within(seen["y1"], n, 1 / 2)


def test_band_concentration_and_strata():
  tasks = [mk(f"t{i}", "text", difficulty=1 + i % 5) for i in range(9)]
  pool = TaskPool(
    tasks, PoolConfig(seed=3, band=(0.05, 0.95), band_weight=0.8, min_obs=4, ema_decay=0.5)
  )
  # Before observations: strata come from the difficulty prior; everything is in band.
  assert pool.stratum("t0") == 0 and pool.stratum("t4") == 4
  assert all(pool.in_band(t.id) for t in tasks)
  for _ in range(10):
    for i in range(3):
      pool.update(f"t{i}", True)  # always solved
    for i in range(3, 6):
      pool.update(f"t{i}", False)  # never solved
  for k in range(10):
    for i in range(6, 9):
      pool.update(f"t{i}", k % 2 == 0)  # sometimes
  inside = {f"t{i}" for i in range(6, 9)}
  assert {t.id for t in tasks if pool.in_band(t.id)} == inside
  assert pool.stratum("t0") == 0 and pool.stratum("t3") == 4  # updated online from observations
  assert pool.strata()[0] == ["t0", "t1", "t2"]
  n = 20000
  hits = sum(pool.sample().id in inside for _ in range(n))
  assert within(hits, n, 0.8)
  # A task whose rate moves into the band rejoins it.
  for _ in range(3):
    pool.update("t0", False)
  assert pool.in_band("t0")


def test_stratum_weights():
  tasks = [mk("easy", difficulty=1), mk("hard", difficulty=5)]
  pool = TaskPool(tasks, PoolConfig(seed=4, stratum_weights=(1.0, 0, 0, 0, 3.0)))
  n = 8000
  hard = sum(pool.sample().id == "hard" for _ in range(n))
  assert within(hard, n, 0.75)


def test_state_roundtrip_is_json_and_resumes_exactly():
  tasks = [mk(f"t{i}", ["text", "git"][i % 2], 1 + i % 5) for i in range(10)]
  a = TaskPool(tasks, PoolConfig(seed=7))
  for i in range(50):
    t = a.sample()
    a.update(t.id, i % 3 == 0)
  state = json.loads(json.dumps(a.state_dict()))
  expect = [a.sample().id for _ in range(200)]
  b = TaskPool(tasks, PoolConfig(seed=999))
  b.load_state_dict(state)
  assert [b.sample().id for _ in range(200)] == expect
  assert b.stratum("t3") == a.stratum("t3") and b.n_sampled == a.n_sampled


def test_seeded():
  tasks = [mk(f"t{i}") for i in range(20)]
  run = lambda s: [t.id for t in TaskPool(tasks, PoolConfig(seed=s)).sample_batch(50)]
  assert run(5) == run(5) and run(5) != run(6)


def test_errors():
  with pytest.raises(ValueError, match="duplicate"):
    TaskPool([mk("a"), mk("a")])
  with pytest.raises(ValueError, match="negative"):
    TaskPool([mk("a")], PoolConfig(domain_weights=(("text", -1.0),)))
  with pytest.raises(ValueError, match="no weight"):
    TaskPool([mk("a", "git")], PoolConfig(domain_weights=(("text", 1.0),))).sample()


def test_ngrams_and_overlap_by_hand():
  a = ngrams("Copy the file a.txt to b.txt now", 3)
  assert ("copy", "the", "file") in a and (".", "txt", "to") in a
  assert len(a) == 11 - 3 + 1  # copy the file a . txt to b . txt now
  b = ngrams("please copy the file a.txt to b.txt", 3)
  assert overlap(a, b) == pytest.approx(len(a & b) / min(len(a), len(b)))
  assert overlap(a, a) == 1.0 and overlap(a, set()) == 0.0
  assert ngrams("two words", 8) == {("two", "words")}


def test_decontamination_report(tmp_path):
  evals = [
    mk(
      "eval/a",
      instruction="Write the distinct lines of words.txt, sorted alphabetically, one per line, to sorted.txt.",
    ),
    mk(
      "eval/b",
      instruction="Something unrelated about git branches and tags.",
      solution="git tag -a v1 -m 'Version one' HEAD~1 && git push origin v1",
    ),
  ]
  train = [
    mk(
      "train/same",
      instruction="Write the distinct lines of words.txt, sorted alphabetically, one per line, to sorted.txt please.",
    ),
    mk(
      "train/solution",
      instruction="Tag a release.",
      solution="git tag -a v1 -m 'Version one' HEAD~1 && git push origin v1\n",
    ),
    mk("train/clean", instruction="Count the vowels in a.txt and write the number to n.txt."),
  ]
  rep = decontaminate(train, evals, n=8, threshold=0.5)
  assert rep["excluded"] == ["train/same", "train/solution"]
  fields = {m["train"]: (m["eval"], m["field"]) for m in rep["matches"]}
  assert fields == {
    "train/same": ("eval/a", "instruction"),
    "train/solution": ("eval/b", "solution"),
  }
  pool = TaskPool(train, PoolConfig(seed=0), eval_tasks=evals)
  assert (
    set(pool.tasks) == {"train/clean"}
    and pool.report()["decontamination"]["excluded"] == rep["excluded"]
  )
  write_decontamination_report(rep, tmp_path / "decontam.json")
  assert json.loads((tmp_path / "decontam.json").read_text()) == rep
  md = (tmp_path / "decontam.md").read_text()
  assert "2 of 3 training tasks excluded" in md and "| train/same | eval/a | instruction |" in md


def test_procedural_family_against_itself_is_contaminated():
  # The demo family's instructions are regular by design: a held-out eval drawn from the same
  # family overlaps the training family, and the report says so.
  train = procedural.sample(20, seed=1, families=["echo_word"])
  evals = procedural.sample(5, seed=2, families=["echo_word"])
  rep = decontaminate(train, evals, n=4, threshold=0.3)
  assert len(rep["excluded"]) == 20  # 3 of the 9 word 4-grams are the template
  rep8 = decontaminate(
    train, procedural.sample(5, seed=2, families=["csv_sum"]), n=8, threshold=0.5
  )
  assert rep8["excluded"] == []


def test_default_pool_honours_the_gate_quarantine_file(tmp_path):
  import dataclasses

  suite = tmp_path / "tasks" / "suite"
  tasks = []
  for name in ("a", "b"):
    (suite / name).mkdir(parents=True)
    tasks.append(dataclasses.replace(mk(f"suite/{name}"), source=str(suite / name)))
  pool = TaskPool(tasks)  # quarantine_path="auto"
  assert {pool.sample().id for _ in range(100)} == {"suite/a", "suite/b"}
  Quarantine(suite / "quarantine.json").add(
    "suite/a", "gate: no-op passes"
  )  # check_tasks --tasks=suite
  assert {pool.sample().id for _ in range(100)} == {"suite/b"}
  Quarantine(tmp_path / "tasks" / "quarantine.json").add("suite/b", "audit")  # --tasks=tasks
  with pytest.raises(RuntimeError, match="quarantined"):
    pool.sample()
  assert TaskPool(tasks, PoolConfig(quarantine_path=None)).sample().id in ("suite/a", "suite/b")
