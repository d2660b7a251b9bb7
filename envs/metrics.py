"""Evaluation metrics over trial records (the dicts `envs.eval` writes to results.json).

pass@k is the unbiased estimator of Chen et al. (2021), 1 - C(n-c, k) / C(n, k), computed as
the product 1 - prod_{i=n-c+1..n} (1 - k / i), which never forms a large binomial. A task's
pass@k needs n >= k graded trials; an aggregate is the mean over the tasks that have them.

Trials whose grade is masked are not attempts of the agent: they are left out of the graded
rates and counted on their own, split by cause: `task_error` (a task that did not load,
`load_error`, or whose own set-up or translation failed, `task_error`) and `infra` (sandbox or
infrastructure errors). `pass@1_all` counts every task error as a failure, so a suite where
3 of 8 tasks could not run does not read as if those 3 were not there.

Long-horizon metrics (tasks with milestones / constraints, see envs.grading.milestones):
  step_success      mean over trials of (milestones reached at some turn) / (milestones declared)
  completion        passed AND every milestone reached AND no constraint ever violated
  forgetting        share of trials (of tasks with constraints) that violated one at any turn
  first_violation   the turn of the first violation (mean / median over violating trials)
"""

from __future__ import annotations

import collections
import statistics
from collections.abc import Iterable, Sequence


def pass_at_k(n: int, c: int, k: int) -> float:
  """Unbiased pass@k from n trials with c successes (n >= k >= 1, 0 <= c <= n)."""
  if not (0 <= c <= n and 1 <= k <= n):
    raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
  if n - c < k:
    return 1.0
  prod = 1.0
  for i in range(n - c + 1, n + 1):
    prod *= 1.0 - k / i
  return 1.0 - prod


def default_ks(max_trials: int) -> list[int]:
  """1, 2, 4, ... up to the number of trials, plus that number itself."""
  ks, k = [], 1
  while k < max_trials:
    ks.append(k)
    k *= 2
  return ks + [max_trials] if max_trials >= 1 else [1]


def _mean(xs: Iterable[float | None]) -> float | None:
  xs = [x for x in xs if x is not None]
  return sum(xs) / len(xs) if xs else None


def _completed(t: dict) -> bool:
  ch = t.get("checks") or {}
  all_ms = ch.get("step_success") in (None, 1.0)
  return bool(t["passed"]) and all_ms and not ch.get("forgot")


def task_stats(trials: Sequence[dict], ks: Sequence[int]) -> dict:
  """Per-task figures from that task's trials."""
  graded = [t for t in trials if not t.get("masked")]
  n, c = len(graded), sum(bool(t["passed"]) for t in graded)
  first = trials[0]
  ch = [t.get("checks") or {} for t in graded]
  violating = [x for x in ch if x.get("forgot")]
  return {
    "task_id": first["task_id"],
    "suite": first.get("suite", ""),
    "domain": first.get("domain", ""),
    "difficulty": first.get("difficulty"),
    "n": n,
    "passed": c,
    "masked": len(trials) - n,
    "pass@k": {str(k): pass_at_k(n, c, k) for k in ks if 1 <= k <= n},
    "mean_reward": _mean(t.get("reward") for t in graded),
    "mean_turns": _mean(t.get("turns") for t in graded),
    "mean_tokens": _mean(t.get("tokens") for t in graded),
    "mean_wall_s": _mean(t.get("wall_s") for t in graded),
    "step_success": _mean(x.get("step_success") for x in ch),
    "completion": _mean(float(_completed(t)) for t in graded) if graded else None,
    "forgetting": (
      _mean(float(bool(x.get("forgot"))) for x in ch)
      if any(x.get("constraints") for x in ch)
      else None
    ),
    "first_violation_turns": [x["first_violation_turn"] for x in violating],
  }


def _group(stats: Sequence[dict], graded: Sequence[dict], ks: Sequence[int]) -> dict:
  """Aggregate over a group of tasks (mean of per-task rates) and its trials."""
  fv = [v for s in stats for v in s["first_violation_turns"]]
  constrained = [t for t in graded if (t.get("checks") or {}).get("constraints")]
  milestoned = [t for t in graded if (t.get("checks") or {}).get("milestones")]
  out = {
    "tasks": len(stats),
    "trials": len(graded),
    "pass@k": {
      str(k): _mean(s["pass@k"].get(str(k)) for s in stats)
      for k in ks
      if any(str(k) in s["pass@k"] for s in stats)
    },
    "mean_reward": _mean(s["mean_reward"] for s in stats),
    "mean_turns": _mean(s["mean_turns"] for s in stats),
    "mean_tokens": _mean(s["mean_tokens"] for s in stats),
    "mean_wall_s": _mean(s["mean_wall_s"] for s in stats),
    "step_success": _mean(t["checks"]["step_success"] for t in milestoned),
    "completion": _mean(float(_completed(t)) for t in graded),
    "forgetting": _mean(float(bool(t["checks"]["forgot"])) for t in constrained),
    "first_violation_mean": _mean(fv),
    "first_violation_median": statistics.median(fv) if fv else None,
  }
  out["pass@1"] = out["pass@k"].get("1")
  return out


TASK_ERRORS = ("task_error", "load_error")
INFRA_ERRORS = ("sandbox_error", "infra_error")


def trial_counts(trials: Sequence[dict]) -> dict[str, int]:
  """Trials by kind: graded (the agent's attempts), task errors, infrastructure errors."""
  c = collections.Counter(t["failure_mode"] for t in trials if t.get("masked"))
  task = sum(c[m] for m in TASK_ERRORS)
  return {
    "trials": len(trials),
    "graded": sum(not t.get("masked") for t in trials),
    "task_error": task,
    "infra": sum(c.values()) - task,
  }


def pass_at_1_all(trials: Sequence[dict]) -> float | None:
  """Mean over tasks of the pass rate, a task error counting as a failed trial (infra excluded)."""
  by_task: dict[str, list[bool]] = collections.defaultdict(list)
  for t in trials:
    if not t.get("masked") or t["failure_mode"] in TASK_ERRORS:
      by_task[t["task_id"]].append(bool(t["passed"]) and not t.get("masked"))
  return _mean(sum(v) / len(v) for v in by_task.values()) if by_task else None


def failure_modes(trials: Iterable[dict]) -> dict[str, int]:
  return dict(sorted(collections.Counter(t["failure_mode"] for t in trials).items()))


def milestone_curve(trials: Iterable[dict], max_turn: int | None = None) -> list[float]:
  """Mean share of milestones reached by each turn 0..T (tasks with milestones only)."""
  rows = [t["checks"] for t in trials if (t.get("checks") or {}).get("milestones")]
  if not rows:
    return []
  last = max((t for r in rows for t in r["checked_turns"]), default=0)
  T = last if max_turn is None else max_turn
  curve = []
  for turn in range(T + 1):
    fr = [
      sum(v is not None and v <= turn for v in r["first_reached"].values()) / r["total"]
      for r in rows
    ]
    curve.append(sum(fr) / len(fr))
  return curve


def aggregate(trials: Sequence[dict], ks: Sequence[int] | None = None) -> dict:
  """Every summary figure: overall, per suite, per domain, per difficulty, per task."""
  if ks is None:
    counts = collections.Counter(t["task_id"] for t in trials)
    ks = default_ks(max(counts.values(), default=1))
  by_task: dict[str, list[dict]] = collections.defaultdict(list)
  for t in trials:
    by_task[t["task_id"]].append(t)
  stats = [task_stats(ts, ks) for _, ts in sorted(by_task.items())]
  graded = [t for t in trials if not t.get("masked")]

  def grouped(key) -> dict:
    groups = collections.defaultdict(list)
    for s in stats:
      groups[str(s[key])].append(s)
    return {
      g: _group(ss, [t for t in graded if str(t.get(key)) == g], ks)
      for g, ss in sorted(groups.items())
    }

  return {
    "ks": list(ks),
    "overall": _group(stats, graded, ks),
    "by_suite": grouped("suite"),
    "by_domain": grouped("domain"),
    "by_difficulty": grouped("difficulty"),
    "failure_modes": failure_modes(trials),
    "masked_trials": len(trials) - len(graded),
    "counts": trial_counts(trials),
    "pass@1_all": pass_at_1_all(trials),
    "milestone_curve": milestone_curve(graded),
    "tasks": stats,
  }
