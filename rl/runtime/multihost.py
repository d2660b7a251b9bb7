"""Multi-process runs (`jax.distributed`): process 0 runs the host loop, the others follow it.

In a job of N > 1 processes only process 0, the leader, runs rollouts, sandboxes, the engine
or Ray fleet, eval, telemetry and the trajectory store. Device work on the global mesh must be
entered by every process, so the leader announces each piece of it and the followers
(`follow`) do the same on their copy of the train state:

  op        leader                                         followers
  share     sends host arrays (the warm start's demos)     receive them
  train     the jitted step on the broadcast packed batch  the same step on the same batch
  params    all-gather of the params for the engine        the same all-gather (dropped)
  save      Checkpointer.save (orbax saves collectively)   the same save (host JSON: leader's)
  restore   Checkpointer.restore                           the same restore
  stop      end of the run; replicas compared              the same, then return
  fail      process 0 raised                               raise

An op's header (name, arguments, array shapes and dtypes) goes through the coordination
service's key-value store, where a follower may wait as long as a batch takes (CPU collectives
give up after 30 s); its arrays then go, as one byte buffer, through one
`broadcast_one_to_all`. The warm start runs as the same code on every process once the demos
are shared. SIGTERM on any process reaches the leader through the same store; the leader then
saves and stops every process at the next step boundary. At the stop every process publishes a
digest of each parameter shard it holds and the leader checks that replicas agree. A single
process gets `Local`: no announcement, no collective.
"""

from __future__ import annotations

import hashlib
import itertools
import json

import jax
import numpy as np
from jax.experimental import multihost_utils

from parallel import sharding
from parallel.rules import merge_rules
from rl.runtime.trainer import Trainer
from rl.train_state import policy_params

_CHANNELS = itertools.count()  # every process opens its channels in the same order


class Local:
  """One process: the leader, with nothing to announce."""

  leader, multi = True, False

  def share(self, arrays):
    return arrays

  def batch(self, batch, mesh, rules=()):
    return batch

  def call(self, fn, *args):
    return fn(*args)

  def to_host(self, tree):
    return jax.device_get(tree)

  def finish(self, state) -> dict:
    return {}

  def abort(self) -> None:
    pass


def channel(timeout_s: float = 3600.0):
  """`Local()` in a single process, else a `Channel` (call in the same order on every process)."""
  return Channel(timeout_s) if jax.process_count() > 1 else Local()


class Channel:
  """Process 0's announcements and every process's side of them (see the module docstring)."""

  multi = True

  def __init__(self, timeout_s: float = 3600.0, poll_s: float = 1.0):
    from jax._src import distributed  # the coordination service's client (as orbax uses it)

    self.client = distributed.global_state.client
    self.leader = jax.process_index() == 0
    self.prefix = f"agentrl/channel{next(_CHANNELS)}"
    self.timeout_ms, self.poll_ms = int(timeout_s * 1000), int(poll_s * 1000)
    self.seq = self.syncs = 0
    self.preempted = lambda: False  # this process's own SIGTERM flag (`watch`)
    self._posted = self._followers_preempted = False

  def watch(self, preempted) -> None:
    """`preempted()` is this process's SIGTERM flag (Checkpointer.preempted)."""
    self.preempted = preempted

  # -- ops ----------------------------------------------------------------
  def announce(self, op: str, arrays: dict | None = None, **args) -> None:
    """Leader: publishes op number `seq`; its arrays are broadcast right after."""
    buf, meta = _pack(arrays or {})
    header = json.dumps({"op": op, "args": args, "arrays": meta, "nbytes": int(buf.size)})
    self.client.key_value_set(self._key("op", self.seq), header)
    if self.seq:  # every op synchronizes all processes, so all have read the previous one
      self.client.key_value_delete(self._key("op", self.seq - 1))
    self.seq += 1
    if meta:
      multihost_utils.broadcast_one_to_all(buf, is_source=True)

  def receive(self, expect: tuple[str, ...] = ()) -> tuple[str, dict, dict]:
    """Follower: waits (as long as it takes) for the next op; returns (op, args, arrays)."""
    key = self._key("op", self.seq)
    while True:
      # Checked before every wait, not only after a timed-out one: ops that always arrive
      # within poll_ms (fast steps) would otherwise keep a SIGTERM from reaching the leader.
      if self.preempted() and not self._posted:  # SIGTERM here: tell the leader
        self.client.key_value_set(self._key("preempt", jax.process_index()), "1")
        self._posted = True
      try:
        header = json.loads(self.client.blocking_key_value_get(key, self.poll_ms))
        break
      except jax.errors.JaxRuntimeError as e:
        if "DEADLINE_EXCEEDED" not in str(e):
          raise
    self.seq += 1
    op = header["op"]
    if op == "fail":
      raise RuntimeError("process 0 failed (see its log); this process stops too")
    if expect and op not in expect:
      raise RuntimeError(f"process 0 announced {op!r} where this process expected {expect}")
    arrays = {}
    if header["arrays"]:
      buf = multihost_utils.broadcast_one_to_all(np.zeros(header["nbytes"], np.uint8), False)
      arrays = _unpack(np.asarray(buf), header["arrays"])
    return op, header["args"], arrays

  def share(self, arrays: dict | None) -> dict:
    """The leader's dict of host arrays on every process (followers pass None)."""
    if self.leader:
      self.announce("share", arrays)
      return {k: np.asarray(v) for k, v in arrays.items()}
    return self.receive(("share",))[2]

  def sync(self, what: str) -> None:
    """A barrier of all processes through the coordination service (no device collective)."""
    self.syncs += 1
    self.client.wait_at_barrier(self._key(f"sync-{what}", self.syncs), self.timeout_ms)

  def followers_preempted(self) -> bool:
    """Leader: has any follower posted a SIGTERM? (sticky)"""
    if not self._followers_preempted:
      self._followers_preempted = bool(self.client.key_value_dir_get(self._key("preempt", "")))
    return self._followers_preempted

  # -- device work, the same on every process -----------------------------
  def batch(self, batch: dict, mesh, rules=()) -> dict:
    """A host batch (identical on every process) -> global arrays with the step's shardings."""
    shs = sharding.batch_shardings(batch, mesh, merge_rules(overrides=rules))
    return {
      k: jax.make_array_from_callback(v.shape, shs[k], lambda idx, v=v: v[idx])
      for k, v in batch.items()
    }

  def ready(self, fn, *args) -> None:
    """Compiles fn for args, then waits for every process to have done so: a slow compile
    would otherwise leave a faster process waiting in a collective past its timeout."""
    if hasattr(fn, "lower"):
      fn.lower(*args).compile()  # cached: the call that follows does not compile again
    self.sync("compiled")

  def call(self, fn, *args):
    self.ready(fn, *args)
    return fn(*args)

  def to_host(self, tree):
    """Global arrays -> NumPy on every process (an all-gather)."""
    return multihost_utils.process_allgather(tree, tiled=True)

  # -- the end ------------------------------------------------------------
  def finish(self, state) -> dict:
    """Leader: stops the followers and checks that every parameter replica agrees."""
    self.announce("stop")
    return self.check_replicas(state.params)

  def abort(self) -> None:
    """Leader: the run raised; the followers raise too instead of waiting."""
    if self.leader:
      self.client.key_value_set(self._key("op", self.seq), json.dumps({"op": "fail"}))

  def check_replicas(self, params) -> dict:
    """Every process publishes per-shard digests; the leader raises if two replicas differ."""
    mine = shard_digests(params)
    self.client.key_value_set(self._key("digest", jax.process_index()), json.dumps(mine))
    self.sync("digests")
    differ = []
    if self.leader:
      seen: dict[str, tuple[str, str]] = {}
      for key, value in self.client.key_value_dir_get(self._key("digest", "")):
        for shard, digest in json.loads(value).items():
          first = seen.setdefault(shard, (digest, key))
          if first[0] != digest:
            differ.append(f"{shard} ({first[1]} vs {key})")
    self.sync("checked")
    if differ:
      raise RuntimeError(f"parameter replicas differ between processes: {differ[:5]}")
    return {"params_digest": hashlib.sha256(json.dumps(mine, sort_keys=True).encode()).hexdigest()}

  def _key(self, kind: str, i) -> str:
    return f"{self.prefix}/{kind}/{i}"


def shard_digests(params) -> dict[str, str]:
  """{'<leaf path>@<shard index>': sha256} of this process's shards (replicas agree locally)."""
  out: dict[str, str] = {}
  for path, leaf in jax.tree_util.tree_leaves_with_path(params):
    for shard in leaf.addressable_shards:
      name = f"{jax.tree_util.keystr(path)}@{shard.index}"
      digest = hashlib.sha256(np.ascontiguousarray(shard.data).tobytes()).hexdigest()
      if out.setdefault(name, digest) != digest:
        raise RuntimeError(f"parameter shard {name} differs between this process's devices")
  return out


def _pack(arrays: dict) -> tuple[np.ndarray, list]:
  """Arrays -> one uint8 buffer (length a power of two: few compiled broadcasts) + layout."""
  meta, parts, offset = [], [], 0
  for name, x in arrays.items():
    x = np.asarray(x)
    if x.dtype.hasobject:
      raise TypeError(f"share: {name!r} has dtype object")
    raw = np.ascontiguousarray(x).reshape(-1).view(np.uint8)
    meta.append([name, x.dtype.str, list(x.shape), offset, int(raw.size)])
    parts.append(raw)
    offset += raw.size
  buf = np.zeros(1 << max(10, (offset - 1).bit_length()), np.uint8)
  if parts:
    buf[:offset] = np.concatenate(parts)
  return buf, meta


def _unpack(buf: np.ndarray, meta: list) -> dict:
  return {
    name: buf[off : off + n].view(np.dtype(dtype)).reshape(shape).copy()
    for name, dtype, shape, off, n in meta
  }


def share_sequences(ch, seqs: list[dict] | None, keys: tuple[str, ...]) -> list[dict]:
  """The leader's list of {key: 1-D array} on every process (as int32/float32 like the leader's)."""
  arrays = None
  if ch.leader:
    lengths = np.array([len(s[keys[0]]) for s in seqs], np.int64)
    arrays = {"lengths": lengths}
    for k in keys:
      parts = [np.asarray(s[k]).reshape(-1) for s in seqs]
      arrays[k] = np.concatenate(parts) if parts else np.zeros(0, np.float32)
  arrays = ch.share(arrays)
  ends = np.cumsum(arrays["lengths"])
  return [
    {k: arrays[k][end - n : end] for k in keys}
    for n, end in zip(arrays["lengths"], ends, strict=True)
  ]


# ---------------------------------------------------------------- the leader's side


class _Checkpointer:
  """The leader's Checkpointer: announces each save/restore; SIGTERM of any process counts."""

  def __init__(self, inner, ch: Channel):
    self.inner, self.ch = inner, ch

  def __getattr__(self, name):
    return getattr(self.inner, name)

  @property
  def preempted(self) -> bool:
    return self.inner.preempted or self.ch.followers_preempted()

  def should_save(self, step: int) -> bool:
    return step % self.inner.every_steps == 0 or self.preempted

  def save(self, step: int, state, host: dict, *, force: bool = False) -> bool:
    if not (force or self.should_save(step)) or step in self.inner.all_steps():
      return False
    self.ch.announce("save", step=step)
    return self.inner.save(step, state, host, force=True)

  def restore(self, state_template, step: int | None = None):
    self.ch.announce("restore", step=step)
    out = self.inner.restore(state_template, step)
    self.ch.sync("restored")
    return out


class LeaderTrainer(Trainer):
  """rl.runtime.trainer.Trainer on process 0 of a multi-process job: each update is announced
  first (through the Trainer's public hooks `params_for_engine` and `train_batch`)."""

  def __init__(self, *, channel: Channel, checkpointer, **kw):
    super().__init__(checkpointer=_Checkpointer(checkpointer, channel), **kw)
    self.ch = channel

  def params_for_engine(self):
    """Host copies for process 0's engine (or Ray fleet): an all-gather every process joins."""
    self.ch.announce("params")
    return self.ch.to_host(policy_params(self.state, self.train_cfg))

  def train_batch(self, batch: dict) -> dict:
    self.ch.announce("train", batch, step=self.step)
    batch = self.ch.batch(batch, self.mesh, self.train_cfg.rules)
    self.ch.ready(self.step_fn(batch), self.state, batch)
    return super().train_batch(batch)


# ---------------------------------------------------------------- the followers' side


def follow(ch: Channel, state, make_step, checkpointer, mesh, train_cfg) -> tuple:
  """A follower's whole run: does each op the leader announces; returns (state, summary)."""
  step_fn = None
  while True:
    op, args, arrays = ch.receive(("train", "params", "save", "restore", "stop"))
    if op == "train":
      batch = ch.batch(arrays, mesh, train_cfg.rules)
      step_fn = step_fn or make_step(batch)
      state, _ = ch.call(step_fn, state, batch)
    elif op == "params":
      ch.to_host(policy_params(state, train_cfg))
    elif op == "save":
      checkpointer.save(args["step"], state, {}, force=True)
    elif op == "restore":
      out = checkpointer.restore(state, args["step"])
      state = state if out is None else out[0]
      ch.sync("restored")
    else:
      return state, ch.check_replicas(state.params)
