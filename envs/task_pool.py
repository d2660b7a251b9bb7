"""The task pool: multi-domain mixing, learnable-band focus, online difficulty strata.

Sampling is hierarchical: a domain by its mixing weight (renormalised over domains that
still have active tasks), then the in-band group (tasks whose recent pass rate is inside
`band`, plus tasks not yet observed enough) with probability `band_weight`, else the rest,
then a task within the group in proportion to its stratum's weight. Pass rates are an
exponential moving average updated by `update()`; strata are quantised failure rates
(stratum 0 = easiest). Quarantined tasks (the shared quarantine file) and tasks
contaminated by an evaluation suite are never sampled. `state_dict()` is JSON-able.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import re
from collections.abc import Iterable, Sequence

import numpy as np

from envs.grading.quality import Quarantine
from envs.task import Task

_PRIOR_PASS = {1: 0.9, 2: 0.7, 3: 0.5, 4: 0.3, 5: 0.1}


@dataclasses.dataclass(frozen=True)
class PoolConfig:
  seed: int = 0
  band: tuple[float, float] = (0.05, 0.95)  # pass rates counted as "neither always nor never"
  band_weight: float = 0.8  # probability of drawing from the in-band group
  min_obs: int = 4  # observations before a task can leave the band
  ema_decay: float = 0.8  # weight of the old pass rate in each update
  domain_weights: tuple[tuple[str, float], ...] = ()  # () = uniform over domains
  n_strata: int = 5
  stratum_weights: tuple[float, ...] = ()  # () = all 1
  # "auto": the quarantine.json that launch.check_tasks writes by default, i.e. in the folder
  # above each task folder and the one above that; a path: that file; None: no quarantine.
  quarantine_path: str | None = "auto"


@dataclasses.dataclass
class _Stat:
  n: int = 0
  passed: int = 0
  rate: float | None = None  # EMA of pass/fail


class TaskPool:
  """Samples training tasks; see the module docstring for the rules."""

  def __init__(
    self,
    tasks: Sequence[Task],
    cfg: PoolConfig = PoolConfig(),
    eval_tasks: Sequence[Task] = (),
    decontam_n: int = 8,
    decontam_threshold: float = 0.5,
  ):
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
      raise ValueError("TaskPool: duplicate task ids")
    self.cfg = cfg
    self.decontamination = (
      decontaminate(tasks, eval_tasks, decontam_n, decontam_threshold) if eval_tasks else None
    )
    dropped = set(self.decontamination["excluded"]) if self.decontamination else set()
    self.tasks = {t.id: t for t in tasks if t.id not in dropped}
    self.stats = {tid: _Stat() for tid in self.tasks}
    self.quarantines = _quarantines(self.tasks.values(), cfg.quarantine_path)
    self.rng = np.random.default_rng(cfg.seed)
    self.n_sampled = 0
    self._version = 0  # bumped by update(); keys the cached sampling groups
    self._groups_key, self._groups = None, None
    weights = dict(cfg.domain_weights)
    for d, w in weights.items():
      if w < 0:
        raise ValueError(f"PoolConfig.domain_weights: negative weight for {d!r}")
    self.domain_weights = weights

  # ------------------------------------------------------------ rates and strata
  def pass_rate(self, task_id: str) -> float:
    """The observed EMA pass rate, or the difficulty prior before any observation."""
    st = self.stats[task_id]
    return st.rate if st.rate is not None else _PRIOR_PASS[self.tasks[task_id].difficulty]

  def stratum(self, task_id: str) -> int:
    k = self.cfg.n_strata
    return min(k - 1, int((1.0 - self.pass_rate(task_id)) * k))

  def strata(self) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {i: [] for i in range(self.cfg.n_strata)}
    for tid in self.active_ids():
      out[self.stratum(tid)].append(tid)
    return out

  def in_band(self, task_id: str) -> bool:
    st = self.stats[task_id]
    if st.n < self.cfg.min_obs:
      return True
    lo, hi = self.cfg.band
    return lo < st.rate < hi

  def update(self, task_id: str, passed: bool | float) -> None:
    """Records one graded attempt (masked attempts must not be reported)."""
    st = self.stats[task_id]
    self._version += 1
    x = float(passed)
    st.n += 1
    st.passed += x >= 1.0
    d = self.cfg.ema_decay
    st.rate = x if st.rate is None else d * st.rate + (1 - d) * x

  # ------------------------------------------------------------ sampling
  def quarantined(self) -> frozenset[str]:
    return frozenset().union(*(q.ids() for q in self.quarantines))

  def active_ids(self) -> list[str]:
    q = self.quarantined()
    return [tid for tid in self.tasks if tid not in q]

  def _domain_probs(self, by_domain: dict[str, list[str]]) -> tuple[list[str], np.ndarray]:
    names = sorted(by_domain)
    w = np.array([self.domain_weights.get(d, 0.0 if self.domain_weights else 1.0) for d in names])
    if w.sum() <= 0:
      raise ValueError(f"TaskPool: no weight on any domain with active tasks ({names})")
    return names, w / w.sum()

  def _pick(self, ids: list[str]) -> str:
    sw = self.cfg.stratum_weights
    if not sw:
      return ids[int(self.rng.integers(len(ids)))]
    w = np.array([sw[self.stratum(t)] for t in ids], dtype=np.float64)
    return ids[int(self.rng.choice(len(ids), p=w / w.sum()))]

  def _sampling_groups(self):
    """(domain names, their probabilities, {domain: (in-band ids, other ids)}), cached."""
    q = self.quarantined()
    key = (q, self._version)
    if key != self._groups_key:
      by_domain: dict[str, list[str]] = {}
      for tid in self.tasks:
        if tid not in q:
          by_domain.setdefault(self.tasks[tid].domain, []).append(tid)
      if not by_domain:
        raise RuntimeError("TaskPool: every task is quarantined or excluded")
      names, p = self._domain_probs(by_domain)
      split = {
        d: ([t for t in ids if self.in_band(t)], [t for t in ids if not self.in_band(t)])
        for d, ids in by_domain.items()
      }
      self._groups_key, self._groups = key, (names, p, split)
    return self._groups

  def sample(self) -> Task:
    names, p, split = self._sampling_groups()
    inside, outside = split[names[int(self.rng.choice(len(names), p=p))]]
    if inside and outside:
      group = inside if self.rng.random() < self.cfg.band_weight else outside
    else:
      group = inside or outside
    self.n_sampled += 1
    return self.tasks[self._pick(group)]

  def sample_batch(self, n: int) -> list[Task]:
    return [self.sample() for _ in range(n)]

  # ------------------------------------------------------------ checkpointing
  def state_dict(self) -> dict:
    return {
      "stats": {tid: [s.n, s.passed, s.rate] for tid, s in self.stats.items()},
      "rng": self.rng.bit_generator.state,
      "n_sampled": self.n_sampled,
    }

  def load_state_dict(self, state: dict) -> None:
    for tid, (n, passed, rate) in state["stats"].items():
      if tid in self.stats:
        self.stats[tid] = _Stat(n, passed, rate)
    self.rng.bit_generator.state = state["rng"]
    self.n_sampled = state["n_sampled"]

  def report(self) -> dict:
    return {
      "n_tasks": len(self.tasks),
      "n_active": len(self.active_ids()),
      "strata": {k: len(v) for k, v in self.strata().items()},
      "in_band": sum(self.in_band(t) for t in self.active_ids()),
      "decontamination": self.decontamination,
    }


def _quarantines(tasks: Iterable[Task], path: str | None) -> list[Quarantine]:
  if path is None:
    return []
  if path != "auto":
    return [Quarantine(path)]
  dirs = set()
  for t in tasks:
    src = pathlib.Path(t.source) if t.source else None
    if src is not None and src.is_dir():
      src = src.resolve()
      dirs |= {src.parent, src.parent.parent}
  return [Quarantine(d / "quarantine.json") for d in sorted(dirs)]


# ---------------------------------------------------------------- decontamination


def _tokens(text: str) -> list[str]:
  return re.findall(r"[a-z0-9_]+|[^\sa-z0-9_]", text.lower())


def ngrams(text: str, n: int) -> set[tuple[str, ...]]:
  toks = _tokens(text)
  if len(toks) < n:
    return {tuple(toks)} if toks else set()
  return {tuple(toks[i : i + n]) for i in range(len(toks) - n + 1)}


def overlap(a: set, b: set) -> float:
  """Shared n-grams over the smaller set's size (1.0: one text is inside the other)."""
  return len(a & b) / min(len(a), len(b)) if a and b else 0.0


def decontaminate(
  train: Iterable[Task], evals: Iterable[Task], n: int = 8, threshold: float = 0.5
) -> dict:
  """Training tasks whose instruction or solution overlaps an eval task's -> excluded, with a report."""
  evals = list(evals)
  index: dict[str, dict[tuple, set[int]]] = {"instruction": {}, "solution": {}}
  grams = []
  for i, e in enumerate(evals):
    g = {"instruction": ngrams(e.instruction, n), "solution": ngrams(e.solution_script, n)}
    grams.append(g)
    for field, gs in g.items():
      for x in gs:
        index[field].setdefault(x, set()).add(i)
  hits, excluded, n_train = [], [], 0
  for t in train:
    n_train += 1
    worst = None
    for field, text in (("instruction", t.instruction), ("solution", t.solution_script)):
      mine = ngrams(text, n)
      cands = set().union(*(index[field].get(x, set()) for x in mine)) if mine else set()
      for i in cands:
        o = overlap(mine, grams[i][field])
        if o >= threshold and (worst is None or o > worst["overlap"]):
          shared = " ".join(next(iter(mine & grams[i][field])))
          worst = {
            "train": t.id,
            "eval": evals[i].id,
            "field": field,
            "overlap": round(o, 4),
            "example": shared,
          }
    if worst:
      hits.append(worst)
      excluded.append(t.id)
  return {
    "n": n,
    "threshold": threshold,
    "n_train": n_train,
    "n_eval": len(evals),
    "excluded": excluded,
    "matches": hits,
  }


def write_decontamination_report(report: dict, path: str | pathlib.Path) -> None:
  """Writes the report as JSON and a short Markdown table beside it."""
  p = pathlib.Path(path)
  p.parent.mkdir(parents=True, exist_ok=True)
  p.write_text(json.dumps(report, indent=2))
  lines = [
    f"# Decontamination: {len(report['excluded'])} of {report['n_train']} training tasks excluded",
    f"word {report['n']}-grams, overlap threshold {report['threshold']}, {report['n_eval']} eval tasks",
    "",
    "| train task | eval task | field | overlap | shared n-gram |",
    "|---|---|---|---|---|",
  ]
  lines += [
    f"| {m['train']} | {m['eval']} | {m['field']} | {m['overlap']:.2f} | `{m['example']}` |"
    for m in report["matches"]
  ]
  p.with_suffix(".md").write_text("\n".join(lines) + "\n")
