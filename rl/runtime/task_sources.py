"""Task sources for the host loop: which task each rollout group gets, plus runtime audits.

A task source answers `task_for(group_id)` (deterministically given its state, so a resumed
run re-issues the same tasks), `get(task_id)`, `demo_tasks(n)` (for the SFT warm start),
`observe_batch(groups)` (called by the trainer with each consumed batch, in group order:
task-pool statistics and `envs.grading.quality.RewardAuditor` audits, quarantine events), and
`state_dict()` / `load_state_dict()` for checkpoints.
"""

from __future__ import annotations

import functools
import pathlib

import numpy as np

from envs.procedural import family
from rl.runtime.records import Group


def _seed(*parts) -> int:
  return int(np.random.SeedSequence(list(parts)).generate_state(1)[0])


class _Audited:
  """Runtime reward audits (envs.grading.quality.RewardAuditor) over consumed batches, in group order."""

  def __init__(self, workdir: pathlib.Path, seed: int, on_event):
    from envs.grading.quality import AuditConfig, Quarantine, RewardAuditor

    self.quarantine = Quarantine(workdir / "quarantine.json")
    self.auditor = RewardAuditor(
      AuditConfig(regrade_prob=0.0, evidence_dir=str(workdir / "audit"), seed=seed), self.quarantine
    )
    self.on_event = on_event or (lambda kind, **kw: None)

  def audit(self, groups: list[Group]) -> dict:
    from envs.grading.scoring import GradeResult

    n0 = len(self.auditor.events)
    for g in sorted(groups, key=lambda g: g.group_id):
      for r in g.rows:
        res = GradeResult(
          r["task_id"],
          bool(r["passed"]),
          float(r["reward"]),
          r["failure_mode"] or "none",
          flags=tuple(r["grade_flags"] or ()),
        )
        self.auditor.observe(r["task_id"], res, r["commands"] or ())
    new = self.auditor.events[n0:]
    for ev in new:
      self.on_event("quarantine" if ev["quarantined"] else "audit_flag", **ev)
    return {
      "quality/audit_flags": float(len(new)),
      "quality/quarantined_tasks": float(len(self.quarantine.ids())),
    }


class ProceduralTasks(_Audited):
  """Tasks of one seeded family: group i gets seed hash(seed, i); eval instructions excluded.

  `pool_size` > 0 cycles through that many fixed tasks instead of fresh ones (group i gets
  task i mod pool_size; demonstrations come from the same pool): a memorisable toy problem.
  """

  def __init__(self, family: str, seed: int, workdir, exclude=(), on_event=None, pool_size=0):
    from envs import procedural

    super().__init__(pathlib.Path(workdir), seed, on_event)
    procedural.generate(family, 0)  # fails early, naming the known families
    self.family, self.seed, self.exclude = family, seed, set(exclude)
    self.pool_size = pool_size
    self._gen = functools.partial(procedural.generate, family)

  def task_for(self, group_id: int, salt: int = 0):
    """The task of group `group_id` (salt 0: training groups, 1: demonstrations)."""
    if self.pool_size:
      group_id, salt = group_id % self.pool_size, 0
    for attempt in range(100):
      task = self._gen(_seed(self.seed, salt, group_id, attempt))
      if task.instruction not in self.exclude:
        return task
    raise RuntimeError(f"procedural family {self.family}: no task outside the eval set")

  def get(self, task_id: str):
    fam, seed = task_id.rsplit("/", 1)[-1].rsplit("-", 1)
    return self._gen(int(seed))

  def demo_tasks(self, n: int) -> list:
    return [self.task_for(i, salt=1) for i in range(n)]

  def corpus_tasks(self, n: int) -> list:
    """Fresh tasks of the family (salt 2, even with a fixed pool) for a tokenizer corpus."""
    return [self._gen(_seed(self.seed, 2, i)) for i in range(n)]

  def observe_batch(self, groups: list[Group]) -> dict:
    return self.audit(groups)

  def state_dict(self) -> dict:
    return {"auditor": self.auditor.state_dict()}

  def load_state_dict(self, d: dict) -> None:
    self.auditor.load_state_dict(d["auditor"])


class PoolTasks(_Audited):
  """A folder of tasks through envs.task_pool.TaskPool (bands, strata, quarantine)."""

  def __init__(self, tasks, seed: int, workdir, eval_tasks=(), on_event=None):
    from envs.task_pool import PoolConfig, TaskPool

    super().__init__(pathlib.Path(workdir), seed, on_event)
    self.pool_seed = seed
    cfg = PoolConfig(seed=seed, quarantine_path=str(self.quarantine.path))
    self.pool = TaskPool(tasks, cfg, eval_tasks=eval_tasks)

  def task_for(self, group_id: int):
    return self.pool.sample()

  def get(self, task_id: str):
    return self.pool.tasks[task_id]

  def demo_tasks(self, n: int) -> list:
    """`n` distinct pool tasks in a seeded order (every family and band alike, not the first
    ids in sort order)."""
    ids = sorted(self.pool.active_ids())
    order = np.random.default_rng([self.pool_seed, 1]).permutation(len(ids))
    return [self.pool.tasks[ids[i]] for i in order[: min(n, len(ids))]]

  def observe_batch(self, groups: list[Group]) -> dict:
    for g in sorted(groups, key=lambda g: g.group_id):
      for r in g.rows:
        self.pool.update(r["task_id"], float(r["passed"]))
    rep = self.pool.report()
    return {
      **self.audit(groups),
      "pool/active_tasks": float(rep["n_active"]),
      "pool/in_band_tasks": float(rep["in_band"]),
    }

  def state_dict(self) -> dict:
    return {"pool": self.pool.state_dict(), "auditor": self.auditor.state_dict()}

  def load_state_dict(self, d: dict) -> None:
    self.pool.load_state_dict(d["pool"])
    self.auditor.load_state_dict(d["auditor"])


def fixed_tasks(fams, seed: int, salt: int, per_family: int, held: set) -> list:
  """`per_family` distinct tasks of each procedural family at training seeds (seed, salt),
  none with the content (content_key) of a task in `held`, which this extends."""
  from envs import procedural

  out = []
  for fi, f in enumerate(fams):
    for i in range(per_family):
      for attempt in range(100):
        t = procedural.generate(f, _seed(seed, salt, fi, i, attempt) % 2**31)
        if content_key(t) not in held:
          break
      else:
        raise RuntimeError(f"procedural family {f}: no task outside the eval set")
      held.add(content_key(t))
      out.append(t)
  return out


def content_key(task) -> tuple:
  """What makes two tasks the same exercise: instruction and starting files (sort_unique's
  instruction is one sentence for every seed; its words.txt differs)."""
  return (task.instruction, tuple((f.path, f.data) for f in task.workspace_files))


def parse_mixed(spec: str) -> tuple[list[str], list[tuple[str, int]]]:
  """`mixed:fam,fam,...+suite<=D+...` -> (families, [(suite, max difficulty)])."""
  from envs import procedural

  parts = spec.split(":", 1)[1].split("+")
  fams = [f.strip() for f in parts[0].split(",") if f.strip()]
  for f in fams:
    if f not in procedural.FAMILIES:
      raise ValueError(f"env.tasks={spec!r}: unknown procedural family {f!r}")
  suites = []
  for p in parts[1:]:
    name, sep, d = p.partition("<=")
    if not sep or not d.strip().isdigit():
      raise ValueError(f"env.tasks={spec!r}: {p!r} is not <suite><=<max difficulty>")
    suites.append((name.strip(), int(d)))
  if not fams:
    raise ValueError(f"env.tasks={spec!r}: no procedural family")
  return fams, suites


class MixedTasks(PoolTasks):
  """Procedural families plus the easy tasks of built-in suites, through one TaskPool.

  The pool holds `per_family` fixed tasks of each family (training seeds) and every task of
  the named suites up to a difficulty; the TaskPool mixes domains, prefers tasks whose pass
  rate is inside its band and weights its difficulty strata (envs.task_pool). Held out:
  `n_eval` tasks of each family at the eval seeds; a training task with the same content as one
  is regenerated (content_key), and suite tasks are decontaminated against the held-out set
  by n-gram overlap (envs.task_pool.decontaminate). `observe_batch` adds per-family pass rates.
  """

  def __init__(self, spec, seed, workdir, *, eval_seed, n_eval, per_family=64, on_event=None):
    from envs import procedural
    from envs.formats.loading import resolve
    from envs.task_pool import decontaminate

    fams, suites = parse_mixed(spec)
    evals = [procedural.generate(f, eval_seed + i) for f in fams for i in range(n_eval)]
    held = {content_key(t) for t in evals}
    train = fixed_tasks(fams, seed, 3, per_family, held)
    extra = []
    for name, max_d in suites:
      tasks, errors = resolve(name)
      if errors:
        raise ValueError(f"env.tasks: suite {name!r}: {errors[0].task_id}: {errors[0].reason}")
      extra += [t for t in tasks if t.difficulty <= max_d]
    self.decontamination = decontaminate(extra, evals)
    dropped = set(self.decontamination["excluded"])
    super().__init__(train + [t for t in extra if t.id not in dropped], seed, workdir, (), on_event)
    self.families, self.eval_tasks = fams + [n for n, _ in suites], evals

  def observe_batch(self, groups: list[Group]) -> dict:
    out = super().observe_batch(groups)
    by: dict[str, list[bool]] = {}
    for g in groups:
      for r in g.rows:
        by.setdefault(family(r["task_id"]), []).append(bool(r["passed"]))
    out.update({f"family/{k}": float(np.mean(v)) for k, v in sorted(by.items())})
    return out


def parse_split(spec: str) -> dict[str, list[str]]:
  """`split:D=fam,..;N=fam,..;U=fam,..` -> {"D": [...], "N": [...], "U": [...]} (disjoint)."""
  from envs import procedural

  out = {}
  for part in spec.split(":", 1)[1].split(";"):
    key, sep, fams = part.partition("=")
    key = key.strip()
    if not sep or key not in ("D", "N", "U") or key in out:
      raise ValueError(f"env.tasks={spec!r}: {part!r} is not D=..., N=... or U=... (each once)")
    out[key] = [f.strip() for f in fams.split(",") if f.strip()]
    for f in out[key]:
      if f not in procedural.FAMILIES:
        raise ValueError(f"env.tasks={spec!r}: unknown procedural family {f!r}")
  if set(out) != {"D", "N", "U"} or not all(out.values()):
    raise ValueError(f"env.tasks={spec!r}: needs non-empty D=, N= and U= family lists")
  every = [f for fams in out.values() for f in fams]
  if len(every) != len(set(every)):
    raise ValueError(f"env.tasks={spec!r}: a family is in more than one of D, N, U")
  return out


class SplitTasks(PoolTasks):
  """Families split by role (configs/smollm2_nodemo.py): demonstrations only from D, RL on N,
  evaluation on held-out N and on U.

  The pool holds `per_family` fixed tasks of each N family; `demo_tasks` draws from as many
  of each D family and nothing else; `no_demo_families` (N and U) is what the warm start's
  demonstrations builder refuses (rl.warm_start.demonstrations), so no reference solution of
  an N or U task reaches any arm's training. Held out: `n_eval` tasks of each N and U family at
  the eval seeds. Decontamination: a pool or D task with the content (content_key: instruction
  and files, which fix the answer) of a held-out task is regenerated, and
  envs.task_pool.decontaminate
  (n-gram overlap) drops pool and D tasks that overlap a held-out task of another family
  (within a family the template is shared by design; the exercise is its content).
  """

  def __init__(self, spec, seed, workdir, *, eval_seed, n_eval, per_family=64, on_event=None):
    from envs import procedural
    from envs.task_pool import decontaminate

    split = parse_split(spec)
    evals = [
      procedural.generate(f, eval_seed + i) for f in split["N"] + split["U"] for i in range(n_eval)
    ]
    held = {content_key(t) for t in evals}
    # The fixed pools come from the eval seed, not the run's: every arm and seed of a
    # comparison trains on one pool and starts from one warm start (its demonstrations).
    train, demos = (
      fixed_tasks(split[k], eval_seed, salt, per_family, held) for k, salt in (("N", 3), ("D", 4))
    )
    self.decontamination = decontaminate(
      train + demos, [e for e in evals if family(e.id) not in split["N"]]
    )
    dropped = set(self.decontamination["excluded"])
    super().__init__([t for t in train if t.id not in dropped], seed, workdir, (), on_event)
    self.format_tasks = [t for t in demos if t.id not in dropped]
    self.split, self.eval_tasks, self.split_seed = split, evals, eval_seed
    self.no_demo_families = frozenset(split["N"] + split["U"])

  def demo_tasks(self, n: int) -> list:
    """`n` format-family (D) tasks in a seeded order (all of them when n exceeds the pool)."""
    order = np.random.default_rng([self.split_seed, 1]).permutation(len(self.format_tasks))
    return [self.format_tasks[i] for i in order[: min(n, len(order))]]

  def corpus_tasks(self, n: int) -> list:
    return self.demo_tasks(n)


def make_task_source(env, seed: int, workdir, on_event=None):
  """(training task source, held-out eval tasks) for `env.tasks` (an experiment.EnvConfig).

  `mixed:fam,...+suite<=D`: MixedTasks, env.eval_tasks held out per family.
  `split:D=..;N=..;U=..`: SplitTasks, the same per N and U family.
  """
  if env.tasks.startswith(("mixed:", "split:")):
    make = MixedTasks if env.tasks.startswith("mixed:") else SplitTasks
    src = make(
      env.tasks,
      seed,
      workdir,
      eval_seed=env.eval_seed,
      n_eval=env.eval_tasks,
      per_family=env.train_pool_size or 64,
      on_event=on_event,
    )
    return src, src.eval_tasks
  if env.tasks.startswith("procedural:"):
    from envs import procedural

    family = env.tasks.split(":", 1)[1]
    evals = [procedural.generate(family, env.eval_seed + i) for i in range(env.eval_tasks)]
    src = ProceduralTasks(
      family, seed, workdir, {t.instruction for t in evals}, on_event, env.train_pool_size
    )
    return src, evals
  from envs.formats.loading import load_tasks

  tasks = sorted(load_tasks(env.tasks), key=lambda t: _seed(env.eval_seed, *t.id.encode()))
  if env.eval_tasks >= len(tasks):
    raise ValueError(
      f"env.eval_tasks={env.eval_tasks} leaves no training task of {len(tasks)} in {env.tasks}"
    )
  evals, train = tasks[: env.eval_tasks], tasks[env.eval_tasks :]
  return PoolTasks(train, seed, workdir, evals, on_event), evals
