"""rl.runtime.checkpoint: exact restore, keep-last-N, interval, SIGTERM flag, kill -9 during an async save."""

import os
import signal
import subprocess
import sys
import textwrap
import threading

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rl.runtime.checkpoint import Checkpointer


def _state(seed):
  k = jax.random.key(seed)
  params = {"w": jax.random.normal(k, (4, 8)), "b": jnp.arange(8.0)}
  opt = optax.adamw(1e-3).init(params)
  return {"params": params, "opt": opt, "step": jnp.int32(seed)}


def test_save_restore_exact_keep_last_and_interval(tmp_path):
  ck = Checkpointer(tmp_path, every_steps=2, keep=2)
  for step in range(1, 8):
    ck.save(step, _state(step), {"step": step, "rng": [step, 7], "buffer": [{"ids": [1, 2]}]})
  ck.wait()
  assert ck.all_steps() == [4, 6]  # every 2 steps, the last 2 kept
  state, host = ck.restore(_state(0))
  chex_equal = jax.tree.map(
    lambda a, b: np.array_equal(np.asarray(a), np.asarray(b)), state, _state(6)
  )
  assert all(jax.tree.leaves(chex_equal))
  assert host == {"step": 6, "rng": [6, 7], "buffer": [{"ids": [1, 2]}]}
  assert ck.save(7, _state(7), {"step": 7}, force=True)  # forced (preemption / end of run)
  ck.close()
  assert Checkpointer(tmp_path).latest_step() == 7


def test_sigterm_sets_preempted_and_forces_the_next_save(tmp_path):
  before = signal.getsignal(signal.SIGTERM)
  ck = Checkpointer(tmp_path, every_steps=100)
  ck.install_signal_handlers()
  try:
    assert not ck.preempted and not ck.should_save(3)
    os.kill(os.getpid(), signal.SIGTERM)
    assert ck.preempted and ck.should_save(3)
  finally:
    ck.close()
  assert signal.getsignal(signal.SIGTERM) is before


class _Console:
  """A console stream that, like a buffered file, refuses a write from the thread that is in
  the middle of one (`RuntimeError: reentrant call`); a Ctrl-C lands inside its first write."""

  def __init__(self):
    self.text, self.writing = "", threading.local()

  def write(self, text):
    if getattr(self.writing, "now", False):
      raise RuntimeError("reentrant call inside <_io.BufferedWriter>")
    self.writing.now = True
    try:
      if not self.text:
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs here, mid-write
      self.text += text
    finally:
      self.writing.now = False
    return len(text)


def test_ctrl_c_during_a_console_write_still_announces_and_sets_preempted(tmp_path, monkeypatch):
  console = _Console()
  monkeypatch.setattr(sys, "stderr", console)
  ck = Checkpointer(tmp_path, every_steps=100)
  ck.install_signal_handlers(signals=(signal.SIGINT,))
  try:
    sys.stderr.write("step 3 of 5\n")
    assert ck.preempted
    with pytest.raises(KeyboardInterrupt):  # the second Ctrl-C aborts
      os.kill(os.getpid(), signal.SIGINT)
  finally:
    ck.close()
  assert "Ctrl-C: saving a checkpoint at the next step boundary" in console.text


def test_no_checkpoint_restores_none(tmp_path):
  assert Checkpointer(tmp_path).restore(_state(0)) is None


_CHILD = textwrap.dedent(
  """
  import sys, time, jax.numpy as jnp
  from rl.runtime.checkpoint import Checkpointer
  ck = Checkpointer(sys.argv[1], every_steps=1, keep=5)
  ck.save(1, {"x": jnp.full((1 << 22,), 1.0)}, {"step": 1})
  ck.wait()
  ck.save(2, {"x": jnp.full((1 << 24,), 2.0)}, {"step": 2})  # 64 MB: still writing when killed
  print("saving", flush=True)
  time.sleep(60)
  """
)


def test_kill9_during_async_save_leaves_a_valid_latest_checkpoint(tmp_path):
  """The kill must land while step 2 is being written (its temporary folder is there and no
  finished step 2): a kill after the save finished proves nothing, so such a try is repeated,
  and the test fails if no try caught the save in flight."""
  env = dict(os.environ, PYTHONPATH=os.getcwd())
  for attempt in range(3):
    workdir = tmp_path / str(attempt)
    p = subprocess.Popen(
      [sys.executable, "-c", _CHILD, str(workdir)], stdout=subprocess.PIPE, env=env, text=True
    )
    try:
      assert p.stdout.readline().strip() == "saving"
    finally:
      p.kill()
      p.wait()
    names = sorted(x.name for x in workdir.iterdir())
    if "2" not in names and any(n.startswith("2.") for n in names):
      break
  else:
    pytest.fail(f"no kill landed mid-save in 3 tries: {names}")
  ck = Checkpointer(workdir)
  assert ck.latest_step() == 1
  state, host = ck.restore({"x": jnp.zeros((1 << 22,))})
  assert host == {"step": 1}
  np.testing.assert_array_equal(np.asarray(state["x"]), np.full((1 << 22,), 1.0))
  ck.close()
