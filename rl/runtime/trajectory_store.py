"""Every trajectory of a run, as Parquet under `WORKDIR/trajectories/`, plus what each step trained on.

Layout:
  trajectories/group-<group_id>.parquet   one file per finished group (one row per episode),
                                          written atomically (temp file, fsync, rename) the
                                          moment the group finishes: the run's write-ahead log.
  batches/step-<step>.parquet             the trajectory ids one update consumed; a step redone
                                          after a resume overwrites its file.

Read everything with `TrajectoryStore(dir).read()` (a pyarrow Table) or any Parquet tool
(`pyarrow.dataset.dataset(dir + "/trajectories")`, pandas, DuckDB). Columns: see `SCHEMA`.
"""

from __future__ import annotations

import os
import pathlib

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

SCHEMA = pa.schema(
  [
    ("trajectory_id", pa.string()),
    ("group_id", pa.int64()),
    ("sample", pa.int32()),
    ("task_id", pa.string()),
    ("domain", pa.string()),
    ("difficulty", pa.int32()),
    ("instruction", pa.string()),
    ("text", pa.string()),  # the model's actions, concatenated
    ("tokens", pa.list_(pa.int32())),  # all segments concatenated
    ("loss_mask", pa.list_(pa.int8())),
    ("logprobs", pa.list_(pa.float32())),
    ("versions", pa.list_(pa.int32())),
    ("segment_lengths", pa.list_(pa.int32())),
    ("reward", pa.float32()),
    ("passed", pa.bool_()),
    ("grade_flags", pa.list_(pa.string())),
    ("commands", pa.list_(pa.string())),  # the shell commands / file writes the agent ran
    ("sub_scores", pa.string()),  # JSON object
    ("failure_mode", pa.string()),
    ("finish_reason", pa.string()),
    ("infra_error", pa.string()),
    ("num_turns", pa.int32()),
    ("tool_errors", pa.int32()),  # turns whose tool call was malformed
    ("generated_tokens", pa.int32()),
    ("min_version", pa.int32()),
    ("max_version", pa.int32()),
    ("gen_s", pa.float32()),
    ("env_s", pa.float32()),
    ("verify_s", pa.float32()),
    ("total_s", pa.float32()),
    ("finished_at", pa.float64()),  # unix time
  ]
)

BATCH_SCHEMA = pa.schema(
  [
    ("step", pa.int64()),
    ("trajectory_id", pa.string()),
    ("group_id", pa.int64()),
    ("staleness", pa.int32()),
    ("replayed", pa.bool_()),
  ]
)


def _atomic_write(table: pa.Table, path: pathlib.Path) -> None:
  tmp = path.with_name(f".{path.name}.tmp")
  pq.write_table(table, tmp)
  with open(tmp, "rb") as f:
    os.fsync(f.fileno())
  os.replace(tmp, path)
  dir_fd = os.open(path.parent, os.O_RDONLY)
  try:
    os.fsync(dir_fd)  # the rename itself must survive a crash
  finally:
    os.close(dir_fd)


class TrajectoryStore:
  """Durable, columnar record of trajectories and of the batches trained on."""

  def __init__(self, root: str | os.PathLike):
    self.root = pathlib.Path(root)
    self.traj_dir = self.root / "trajectories"
    self.batch_dir = self.root / "batches"
    self.traj_dir.mkdir(parents=True, exist_ok=True)
    self.batch_dir.mkdir(parents=True, exist_ok=True)

  def _group_path(self, group_id: int) -> pathlib.Path:
    return self.traj_dir / f"group-{group_id:09d}.parquet"

  def write_group(self, rows: list[dict]) -> None:
    """Writes one finished group (rows follow SCHEMA; missing columns become null)."""
    if not rows:
      raise ValueError("write_group: empty group")
    gids = {r["group_id"] for r in rows}
    if len(gids) != 1:
      raise ValueError(f"write_group: rows span several group ids {sorted(gids)}")
    unknown = set().union(*rows) - set(SCHEMA.names)
    if unknown:
      raise ValueError(f"write_group: unknown columns {sorted(unknown)}")
    cols = {name: [r.get(name) for r in rows] for name in SCHEMA.names}
    _atomic_write(pa.table(cols, schema=SCHEMA), self._group_path(gids.pop()))

  def has_group(self, group_id: int) -> bool:
    return self._group_path(group_id).exists()

  def read_group(self, group_id: int) -> list[dict] | None:
    path = self._group_path(group_id)
    if not path.exists():
      return None
    return pq.read_table(path).to_pylist()

  def read(self, columns: list[str] | None = None) -> pa.Table:
    """All trajectories of the run, as one table (empty with SCHEMA if none)."""
    files = sorted(str(p) for p in self.traj_dir.glob("group-*.parquet"))
    if not files:
      return SCHEMA.empty_table().select(columns or SCHEMA.names)
    return ds.dataset(files, schema=SCHEMA, format="parquet").to_table(columns=columns)

  def write_batch(self, step: int, rows: list[dict]) -> None:
    """Records the trajectory ids consumed by update `step` (overwrites a redone step)."""
    cols = {
      name: [r.get(name, step if name == "step" else None) for r in rows]
      for name in BATCH_SCHEMA.names
    }
    _atomic_write(pa.table(cols, schema=BATCH_SCHEMA), self.batch_dir / f"step-{step:08d}.parquet")

  def read_batches(self, max_step: int | None = None) -> pa.Table:
    files = sorted(self.batch_dir.glob("step-*.parquet"))
    if max_step is not None:
      files = [f for f in files if int(f.stem.split("-")[1]) <= max_step]
    if not files:
      return BATCH_SCHEMA.empty_table()
    return ds.dataset([str(f) for f in files], schema=BATCH_SCHEMA, format="parquet").to_table()

  def discard_batches_after(self, step: int) -> None:
    """On resume from `step`: later batch records belong to updates that will be redone."""
    for f in self.batch_dir.glob("step-*.parquet"):
      if int(f.stem.split("-")[1]) > step:
        f.unlink()
