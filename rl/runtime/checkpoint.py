"""Orbax checkpoints of a run: device state + host state, async, keep last N, every K steps, SIGTERM.

A checkpoint at step S holds two items:
  state  the train state pytree (params, optimizer state, step; reference params when KL is on),
         saved with `StandardSave` so sharded arrays restore onto the same shardings;
  host   JSON: RNG key data, task-pool state, the buffer's groups (their full trajectories),
         the in-flight accounting (groups issued but unfinished, the next group id), counters.

Saving is asynchronous (orbax copies device arrays to host, then writes in a background
thread); a checkpoint directory becomes visible only once complete, so a `kill -9` during a save
leaves the previous checkpoint intact. SIGTERM and SIGINT (Ctrl-C) only raise a flag:
the loop saves at the next step boundary and exits cleanly (`preempted`).
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import jax
import orbax.checkpoint as ocp


class Checkpointer:
  """Keeps the last `keep` checkpoints, saving every `every_steps` steps and on preemption."""

  def __init__(
    self,
    directory: str | os.PathLike,
    *,
    every_steps: int = 10,
    keep: int = 3,
    async_save: bool = True,
  ):
    if every_steps <= 0 or keep <= 0:
      raise ValueError(f"every_steps and keep must be > 0, got {every_steps}, {keep}")
    self.every_steps = every_steps
    self.directory = os.path.abspath(directory)
    self.manager = ocp.CheckpointManager(
      self.directory,
      options=ocp.CheckpointManagerOptions(
        max_to_keep=keep,
        save_interval_steps=1,  # the interval is decided here, so SIGTERM can force a save
        enable_async_checkpointing=async_save,
        cleanup_tmp_directories=True,
      ),
    )
    self._preempted = threading.Event()
    self._old_handlers: dict = {}
    self._notice: threading.Thread | None = None

  # -- preemption ---------------------------------------------------------
  def install_signal_handlers(self, signals=(signal.SIGTERM,)) -> None:
    """On these signals, only set `preempted`; the loop saves and exits at a step boundary.

    A second SIGINT (Ctrl-C) while a save is pending aborts at once (KeyboardInterrupt).
    """
    if threading.current_thread() is not threading.main_thread():
      return  # signal handlers can only be installed from the main thread
    for sig in signals:
      self._old_handlers[sig] = signal.signal(sig, self._on_signal)

  def _on_signal(self, sig, _frame) -> None:
    if sig == signal.SIGINT:
      if self._preempted.is_set():
        raise KeyboardInterrupt
      # Written by another thread: the handler may run while the main thread is inside a write
      # to the same buffered stream (the console, the workdir's log), where a write from here
      # raises "reentrant call"; another thread waits for that write to end instead.
      self._notice = threading.Thread(target=_announce_ctrl_c, daemon=True)
      self._notice.start()
    self._preempted.set()

  def restore_signal_handlers(self) -> None:
    for sig, old in self._old_handlers.items():
      signal.signal(sig, old)
    self._old_handlers.clear()

  @property
  def preempted(self) -> bool:
    return self._preempted.is_set()

  # -- save / restore -----------------------------------------------------
  def should_save(self, step: int) -> bool:
    return step % self.every_steps == 0 or self.preempted

  def save(self, step: int, state, host: dict, *, force: bool = False) -> bool:
    """Starts an async save of (state, host) at `step` if due (or forced); True if started."""
    if not (force or self.should_save(step)):
      return False
    if step in self.manager.all_steps():
      return False
    return self.manager.save(
      step,
      args=ocp.args.Composite(state=ocp.args.StandardSave(state), host=ocp.args.JsonSave(host)),
      force=True,
    )

  def latest_step(self) -> int | None:
    return self.manager.latest_step()

  def all_steps(self) -> list[int]:
    return list(self.manager.all_steps())

  def restore(self, state_template, step: int | None = None):
    """Returns (state, host) of `step` (default: latest), or None if there is no checkpoint.

    `state_template` is a state pytree (or its ShapeDtypeStructs) giving structure, dtypes and
    shardings of what to restore.
    """
    step = self.latest_step() if step is None else step
    if step is None:
      return None
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state_template)
    out = self.manager.restore(
      step,
      args=ocp.args.Composite(
        state=ocp.args.StandardRestore(abstract), host=ocp.args.JsonRestore()
      ),
    )
    return out.state, out.host

  def wait(self) -> None:
    self.manager.wait_until_finished()

  def close(self) -> None:
    self.manager.wait_until_finished()
    self.manager.close()
    self.restore_signal_handlers()
    if self._notice is not None:
      self._notice.join(timeout=10)


def _announce_ctrl_c() -> None:
  sys.stderr.write(
    "\nCtrl-C: saving a checkpoint at the next step boundary (Ctrl-C again aborts)\n"
  )
