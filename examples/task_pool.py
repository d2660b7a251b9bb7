"""The README's task-pool snippet, runnable: decontamination, weighted sampling, online strata.

  python examples/task_pool.py

The reward auditor of the README's snippet needs graded episodes (envs.grading.quality, run by the
training loop); here the pass/fail outcomes are made up to show the pool's bookkeeping.
"""

import collections
import json
import tempfile

from envs.formats.loading import load_tasks
from envs.task_pool import PoolConfig, TaskPool, write_decontamination_report


def main() -> dict:
  tasks = load_tasks("envs/tasks/core")
  domains = sorted({t.domain for t in tasks})
  train, eval_suite = tasks[:-8], tasks[-8:]
  with tempfile.TemporaryDirectory() as tmp:
    # domain_weights is explicit: a domain it does not list is never drawn.
    weights = tuple((d, 2.0 if d == domains[0] else 1.0) for d in domains)
    pool = TaskPool(
      train,
      PoolConfig(seed=0, band=(0.05, 0.95), band_weight=0.8, domain_weights=weights,
                 quarantine_path=f"{tmp}/q.json"),
      eval_tasks=eval_suite,  # n-gram decontamination: overlaps excluded
    )  # fmt: skip
    write_decontamination_report(pool.decontamination, f"{tmp}/decontam.json")  # + decontam.md
    drawn = collections.Counter()
    for i in range(64):
      task = pool.sample()
      drawn[task.domain] += 1
      pool.update(task.id, i % 3 == 0)  # strata update online
    state = pool.state_dict()  # JSON-able, for checkpoints
    json.dumps(state)
  print(f"{len(pool.tasks)} training tasks after decontamination; drawn by domain: {dict(drawn)}")
  return dict(drawn)


if __name__ == "__main__":
  main()
