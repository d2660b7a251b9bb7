"""The warm start's own checkpoints (WORKDIR/warm_start), so a killed warm start resumes.

On the real model a warm start is an hour of supervised steps; before these, a `kill -9` (or a
session's end) in it lost all of them and the demonstrations' replay too. Now WORKDIR/warm_start
holds the demonstrations it trains on (demos.json, written once, atomically) and its TrainState
(orbax, the last one kept): every `sft.checkpoint_every_s` seconds of steps, at Ctrl-C /
SIGTERM, and after its last step. A run that finds them (and no RL checkpoint) loads the
demonstrations instead of replaying them and goes on from the saved step, drawing the same
batches as an uninterrupted run (rl.warm_start). Once RL checkpoints exist, the folder goes.
One process only: a multi-process warm start starts over (rl/runtime/multihost.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import time

from rl.runtime.checkpoint import Checkpointer


def _digest(demos: list[dict]) -> str:
  return hashlib.sha256(json.dumps(demos, sort_keys=True).encode()).hexdigest()[:16]


class WarmCheckpoints:
  """Saves and restores the warm start's TrainState and demonstrations (see module doc)."""

  def __init__(self, workdir, every_s: float):
    self.dir = pathlib.Path(workdir) / "warm_start"
    self.every_s = every_s
    self._ckpt: Checkpointer | None = None
    self._last = time.monotonic()
    self._digest: str | None = None

  def _manager(self) -> Checkpointer:
    if self._ckpt is None:
      self._ckpt = Checkpointer(self.dir / "checkpoints", every_steps=1, keep=1)
    return self._ckpt

  def exists(self) -> bool:
    return (self.dir / "demos.json").is_file()

  def load_demos(self) -> list[dict] | None:
    """The saved demonstrations, or None; a damaged file is a one-line error naming it."""
    path = self.dir / "demos.json"
    if not path.is_file():
      return None
    try:
      demos = json.loads(path.read_text())
    except (OSError, ValueError) as e:
      raise ValueError(f"{path}: unreadable warm-start demonstrations ({e}); delete "
                       f"{self.dir} to replay them and start the warm start over") from e  # fmt: skip
    self._digest = _digest(demos)
    return demos

  def save_demos(self, demos: list[dict]) -> None:
    self.dir.mkdir(parents=True, exist_ok=True)
    tmp = self.dir / "demos.json.tmp"
    tmp.write_text(json.dumps(demos))
    os.replace(tmp, self.dir / "demos.json")
    self._digest = _digest(demos)

  def restore(self, template):
    """(state, step) of the last save, shaped and sharded as `template`; None if none."""
    if not (self.dir / "checkpoints").is_dir() or self._manager().latest_step() is None:
      return None
    state, host = self._manager().restore(template)
    if host.get("demos") != self._digest:
      raise ValueError(
        f"{self.dir}: its checkpoint was trained on other demonstrations than demos.json; "
        f"delete {self.dir} to start the warm start over"
      )
    self._last = time.monotonic()
    return state, int(host["sft_step"])

  def save(self, step: int, state, *, force: bool = False) -> bool:
    """Saves the state after `step` supervised steps if due or `force` (the warm start forces
    it at Ctrl-C / SIGTERM, through its `stop`, and after its last step)."""
    due = force or time.monotonic() - self._last >= self.every_s
    if not due:
      return False
    self._manager().save(step, state, {"sft_step": step, "demos": self._digest}, force=True)
    self._last = time.monotonic()
    return True

  def close(self) -> None:
    if self._ckpt is not None:
      self._ckpt.close()
      self._ckpt = None

  def remove(self) -> None:
    """Drops the folder (RL's own checkpoints hold the run from here on)."""
    self.close()
    shutil.rmtree(self.dir, ignore_errors=True)
