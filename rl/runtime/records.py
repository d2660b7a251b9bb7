"""Trajectory records: ids, seeds, a group of store rows, and the store row of one episode.

Trajectory ids are `g<group_id>-s<sample>`; an episode's seed is a function of (run seed,
group, sample, attempt) only, so a resumed run replays exactly what an uninterrupted one does.
Rows follow rl.runtime.trajectory_store.SCHEMA.
"""

from __future__ import annotations

import dataclasses
import json
import time

import numpy as np

from envs.episodes import Outcome


def trajectory_id(group_id: int, sample: int) -> str:
  return f"g{group_id:07d}-s{sample:02d}"


def episode_seed(run_seed: int, group_id: int, sample: int, attempt: int) -> int:
  return int(np.random.SeedSequence([run_seed, group_id, sample, attempt]).generate_state(1)[0])


@dataclasses.dataclass
class Group:
  """The G episodes of one task, as store rows (SCHEMA of rl.runtime.trajectory_store)."""

  group_id: int
  task_id: str
  rows: list[dict]
  status: str = "accepted"  # accepted | zero_variance | infra

  @property
  def min_version(self) -> int:
    vs = [r["min_version"] for r in self.rows if r.get("min_version", -1) >= 0]
    return min(vs) if vs else 0

  @property
  def rewards(self) -> list[float]:
    return [float(r["reward"]) for r in self.rows]

  def to_json(self) -> dict:
    return {
      "group_id": self.group_id,
      "task_id": self.task_id,
      "rows": self.rows,
      "status": self.status,
    }

  @classmethod
  def from_json(cls, d: dict) -> Group:
    return cls(d["group_id"], d["task_id"], d["rows"], d.get("status", "accepted"))


def episode_row(task, group_id: int, sample: int, out: Outcome) -> dict:
  """A store row (rl.runtime.trajectory_store.SCHEMA) for one graded episode."""
  ep = out.episode
  cat = lambda f: [x for s in ep.segments for x in getattr(s, f)]
  versions = [v for s in ep.segments for v, m in zip(s.versions, s.loss_mask, strict=True) if m]
  return dict(
    trajectory_id=trajectory_id(group_id, sample),
    group_id=group_id,
    sample=sample,
    task_id=task.id,
    domain=task.domain,
    difficulty=int(task.difficulty),
    instruction=task.instruction,
    text=ep.text,
    tokens=cat("tokens"),
    loss_mask=cat("loss_mask"),
    logprobs=cat("logprobs"),
    versions=cat("versions"),
    segment_lengths=[len(s.tokens) for s in ep.segments],
    reward=float(out.reward),
    sub_scores=json.dumps(out.sub_scores),
    failure_mode=out.failure_mode,
    finish_reason=ep.finish_reason,
    infra_error=out.infra_error or ep.infra_error,
    num_turns=len(ep.turns),
    tool_errors=sum(t.error is not None for t in ep.turns),
    generated_tokens=ep.generated_tokens,
    min_version=min(versions) if versions else -1,
    max_version=max(versions) if versions else -1,
    gen_s=sum(t.gen_s for t in ep.turns),
    env_s=sum(t.env_s for t in ep.turns),
    verify_s=out.verify_s,
    total_s=ep.duration_s + out.verify_s,
    finished_at=time.time(),
    passed=bool(out.passed),
    grade_flags=list(out.flags),
    commands=[t.command for t in ep.turns if t.command is not None],
  )
