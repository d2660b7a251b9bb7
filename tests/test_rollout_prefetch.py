"""Sandbox prefetch (rollout.prefetch_groups): set-up runs ahead of admission, bounded; sync
admits in issue order, async whichever group is ready first; a failed set-up is an infra error
of the first attempt only; nothing prepared leaks; prefetched ids are in the in-flight list.
The last test runs a prefetched task sandbox for real (bubblewrap, verifier)."""

import dataclasses
import threading
import time

from envs import procedural
from envs.agents import agent, tool_format
from envs.episodes import Outcome, SandboxEpisodes
from envs.sandbox.base import SandboxError
from envs.task import Task, TestSpec
from models.io.tokenizer import ByteTokenizer
from rl.config import RolloutConfig
from rl.runtime.buffer import StalenessBuffer
from rl.runtime.rollout import RolloutManager
from rl.runtime.trajectory_store import TrajectoryStore


class Tasks:
  def task_for(self, gid):
    return self.get(f"t{gid}")

  def get(self, task_id):
    return Task(task_id, "do", "file_ops", 1, TestSpec())

  def state_dict(self):
    return {}

  def load_state_dict(self, state):
    assert state == {}


class Box:
  def __init__(self, task_id):
    self.task_id, self.closed = task_id, False

  def close(self):
    self.closed = True


class PreparedEpisodes:
  """prepare() sleeps `slow[task]` seconds, waits for `release` for `held` tasks (or raises
  for `broken` ones); episodes record
  which prepared box they got; reward = sample parity (every group has variance)."""

  def __init__(self, slow=None, broken=(), held=()):
    self.slow, self.broken, self.held = slow or {}, set(broken), set(held)
    self.release = threading.Event()
    self.lock = threading.Lock()
    self.boxes, self.used, self.prepares, self.calls = [], [], [], []
    self.preparing = self.max_preparing = self.failed = 0
    self.version = 0  # the policy version the episodes' tokens carry

  def prepare(self, task):
    with self.lock:
      self.prepares.append(task.id)
      self.preparing += 1
      self.max_preparing = max(self.max_preparing, self.preparing)
    try:
      time.sleep(self.slow.get(task.id, 0.0))
      if task.id in self.held:
        self.release.wait(30)
      if task.id in self.broken and self.prepares.count(task.id) <= 2:
        with self.lock:
          self.failed += 1
        raise SandboxError("image pull failed")
      box = Box(task.id)
      with self.lock:
        self.boxes.append(box)
      return box
    finally:
      with self.lock:
        self.preparing -= 1

  def __call__(self, task, tid, seed, policy=None, prepared=None):
    with self.lock:
      self.calls.append((tid, prepared))
    v = self.version
    seg = agent.Segment([1, 2, 3], [0, 1, 1], [0.0, -0.5, -0.5], [-1, v, v])
    ep = agent.Episode(tid, [seg], [agent.TurnRecord("a", "shell", None)], "finish")
    if isinstance(prepared, BaseException):
      ep.infra_error = f"SandboxError: {prepared}"
      return Outcome(ep, infra_error=ep.infra_error)
    if prepared is not None:
      assert prepared.task_id == task.id and not prepared.closed
      with self.lock:
        self.used.append(prepared)
      prepared.close()
    r = float(int(tid[-2:]) % 2)
    return Outcome(ep, r, passed=r == 1.0)


def _manager(tmp_path, eps, staleness, prefetch, batch=2):
  buf = StalenessBuffer(batch_size=batch, max_staleness=staleness)
  cfg = RolloutConfig(group_size=2, max_concurrency=8, prefetch_groups=prefetch)
  m = RolloutManager(
    cfg, run_episode=eps, tasks=Tasks(), buffer=buf, store=TrajectoryStore(tmp_path)
  )
  return m, buf


def _first_batch(m, buf):
  m.start()
  try:
    return buf.get_batch(timeout=30)
  finally:
    m.stop()


def _no_leaks(eps, timeout=20.0):
  # preparations still running at stop close their own box when done: wait for every one
  # to finish and every box to close, failing loudly at the deadline
  deadline = time.monotonic() + timeout
  while True:
    with eps.lock:
      done = eps.preparing == 0 and all(b.closed for b in eps.boxes)
      open_ids = [b.task_id for b in eps.boxes if not b.closed]
    if done:
      break
    assert time.monotonic() < deadline, f"prepared boxes never closed: {open_ids}"
    time.sleep(0.02)
  assert eps.boxes, "nothing was prepared: the leak check would test nothing"
  assert len(eps.prepares) == len(eps.boxes) + eps.failed  # every set-up ended in a box
  assert len({id(b) for b in eps.used}) == len(eps.used)  # each box used at most once


def test_async_admits_the_first_ready_group_and_set_up_is_bounded(tmp_path):
  eps = PreparedEpisodes(held={"t0"})  # group 0's set-up does not end until released
  m, buf = _manager(tmp_path, eps, staleness=1, prefetch=4)
  m.start()
  try:
    batch = buf.get_batch(timeout=30)
    snap = m.snapshot()
    # group 0's unfinished set-up held no admission slot: a batch came without it
    assert not any(b.task_id == "t0" for b in eps.boxes)
  finally:
    eps.release.set()
    m.stop()
  assert 0 not in [g.group_id for g in batch]
  assert "0" in snap["inflight"]  # prefetched (or running): re-issued after a resume
  assert eps.max_preparing <= 4 * 2  # prefetch_groups * group_size sandboxes at most
  assert all(p is not None for _, p in eps.calls)  # every first attempt used a prepared box
  _no_leaks(eps)


def test_sync_admits_in_issue_order(tmp_path):
  eps = PreparedEpisodes(slow={"t0": 1.0})
  m, buf = _manager(tmp_path, eps, staleness=0, prefetch=3)
  batch = _first_batch(m, buf)
  assert [g.group_id for g in batch] == [0, 1]  # the same groups as without prefetch
  _no_leaks(eps)


def test_failed_set_up_is_an_infra_error_of_the_first_attempt(tmp_path):
  eps = PreparedEpisodes(broken={"t0"})
  m, buf = _manager(tmp_path, eps, staleness=0, prefetch=2)
  batch = _first_batch(m, buf)
  assert [g.group_id for g in batch] == [0, 1]
  t0_calls = [(tid, p) for tid, p in eps.calls if tid.startswith("g0000000")]
  # first attempts got the set-up error; the retries set up their own sandbox (prepared=None)
  assert sorted(isinstance(p, SandboxError) for _, p in t0_calls) == [False, False, True, True]
  assert all(p is None for _, p in t0_calls if not isinstance(p, SandboxError))
  assert not any(r["infra_error"] for r in batch[0].rows)
  _no_leaks(eps)


def test_prefetch_is_off_without_prepare(tmp_path):
  calls = []

  def run_episode(task, tid, seed):  # no prepare(): no prefetch, no `prepared` argument
    calls.append(tid)
    seg = agent.Segment([1, 2], [0, 1], [0.0, -0.5], [-1, 0])
    ep = agent.Episode(tid, [seg], [], "finish")
    return Outcome(ep, float(int(tid[-2:]) % 2))

  m, buf = _manager(tmp_path, run_episode, staleness=0, prefetch=4)
  assert m.prefetch == 0
  assert [g.group_id for g in _first_batch(m, buf)] == [0, 1]


def test_a_prefetched_bwrap_sandbox_runs_its_episode():
  tok = ByteTokenizer()
  acfg = agent.AgentConfig(max_turns=2, max_new_tokens=256, max_context_tokens=2048)
  eps = SandboxEpisodes(None, tool_format.ChatFormat(tok, ""), acfg)
  task = procedural.generate("echo_word", 3)
  task = dataclasses.replace(task, setup_script="echo set-up >> setup.log\n")
  # passes only if set-up ran exactly once, in the sandbox the episode used
  cmd = f'test "$(cat setup.log)" = set-up && {task.solution_script.strip()}'
  calls = [
    tool_format.format_tool_call("shell", command=cmd),
    tool_format.format_tool_call("finish"),
  ]
  ts = eps.prepare(task)
  out = eps(task, "t", 0, policy=agent.ScriptedPolicy(tok, calls), prepared=ts)
  assert out.infra_error is None and out.passed
  assert ts.sandbox._closed  # the episode closed the prefetched sandbox
  bad = eps(task, "t", 0, policy=agent.ScriptedPolicy(tok, calls), prepared=SandboxError("gone"))
  assert bad.infra_error == "SandboxError: gone" and not bad.passed


def test_a_resumed_run_reissues_prefetched_groups(tmp_path):
  eps = PreparedEpisodes(slow={"t2": 0.5})
  a, buf = _manager(tmp_path / "a", eps, staleness=0, prefetch=3)
  a.start()
  try:
    first = [g.group_id for g in buf.get_batch(timeout=30)]
    snap = a.snapshot()  # groups 2.. are prefetched or running, none consumed
  finally:
    a.stop()
  assert first == [0, 1]
  assert {"2", "3"} <= set(snap["inflight"])
  # resume as rl.runtime.trainer does: restart rule, next id, re-issue the in-flight list
  eps2 = PreparedEpisodes()
  eps2.version = 1  # the restored policy
  b, buf2 = _manager(tmp_path / "b", eps2, staleness=0, prefetch=3)
  buf2.restore(1, [])
  b.start(b.restore(snap))
  try:
    assert [g.group_id for g in buf2.get_batch(timeout=30)] == [2, 3]  # what `a` would train
  finally:
    b.stop()
  assert eps2.prepares[:2] == ["t2", "t2"]  # re-issued groups are prepared first
  _no_leaks(eps)
  _no_leaks(eps2)
