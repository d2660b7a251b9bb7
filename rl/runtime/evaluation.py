"""The training-time evaluation: held-out tasks once each, pass rates by domain/difficulty."""

from __future__ import annotations

import collections
import concurrent.futures

import numpy as np

from rl.runtime.records import episode_seed
from rl.runtime.task_sources import family


def evaluate(run_episode, tasks, *, workers: int = 8, prefix: str = "eval", seed: int = 0) -> dict:
  """Runs each task once (with `run_episode`'s policy settings); pass rates by domain/difficulty.

  Task i samples with its own seed, episode_seed(seed, i, 0, 0), the same at every eval (one
  seed for all tasks would make every sampled eval draw the same choice at the same step).
  Infrastructure failures are excluded from the rates and counted in `<prefix>/infra_errors`.
  """

  def one(i_task):
    i, task = i_task
    return task, run_episode(task, f"{prefix}-{task.id}", episode_seed(seed, i, 0, 0))

  with concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix=prefix) as ex:
    results = list(ex.map(one, enumerate(tasks)))
  ok = [(t, o) for t, o in results if not o.infra_error]
  out = {f"{prefix}/infra_errors": float(len(results) - len(ok)), f"{prefix}/n": float(len(ok))}
  if not ok:
    return out
  out[f"{prefix}/pass_rate/overall"] = float(np.mean([o.passed for _, o in ok]))
  out[f"{prefix}/reward/mean"] = float(np.mean([o.reward for _, o in ok]))
  for attr in ("domain", "difficulty"):
    by = collections.defaultdict(list)
    for t, o in ok:
      by[getattr(t, attr)].append(o.passed)
    for k, v in by.items():
      out[f"{prefix}/pass_rate/{attr}/{k}"] = float(np.mean(v))
  fams = collections.defaultdict(list)
  for t, o in ok:
    fams[family(t.id)].append(o.passed)
  if len(fams) > 1:  # a mixed pool (task_sources.MixedTasks): per procedural family / suite
    out.update({f"{prefix}/family/{k}": float(np.mean(v)) for k, v in fams.items()})
  out[f"{prefix}/generated_tokens"] = float(np.mean([o.episode.generated_tokens for _, o in ok]))
  return out
