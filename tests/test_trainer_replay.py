"""loop.replay_groups through the real Trainer: which groups are replayed, and the replay buffer
saved in an orbax checkpoint and restored on resume.

The real Trainer, RolloutManager, StalenessBuffer, TrajectoryStore, Checkpointer (orbax),
Telemetry and jitted GRPO step on a tiny model, fed by seeded episodes (tests/async_harness)
whose rewards are fixed by the group id: even groups' rewards vary (0 and 1), odd groups' do
not. So groups with non-zero advantage surely occur and replay surely happens; which groups the
rule replays is worked out from the store's own batch records.
"""

import dataclasses

import async_harness as h
import jax

from envs.agents import agent
from envs.episodes import Outcome
from models.config import tiny
from parallel.mesh import single_device_mesh
from rl.config import LoopConfig, OptimConfig, TrainConfig
from rl.runtime.checkpoint import Checkpointer
from rl.runtime.telemetry import Telemetry
from rl.runtime.trainer import Trainer
from rl.runtime.trajectory_store import TrajectoryStore
from rl.train_state import create_train_state

MODEL = tiny("qwen3", vocab_size=64, d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64)
TRAIN = TrainConfig(optim=OptimConfig(lr=1e-3, warmup_steps=0, decay_steps=10))
# replay_groups is larger than the buffer can ever hold within the staleness bound, so the
# rule's random pick takes every eligible group and the replayed set is exact.
LOOP = LoopConfig(
  mode="sync",
  steps=4,
  batch_groups=2,
  row_len=32,
  max_segments=4,
  checkpoint_every=1,
  keep_checkpoints=10,
  eval_every=0,
  replay_groups=8,
  replay_capacity=32,
  replay_max_staleness=1,
  batch_timeout_s=120.0,
)


def _varies(gid: int) -> bool:
  return gid % 2 == 0


class Generator(h.Policy):
  """The engine's version counter (tokens are tagged with it) and its (empty) stats."""

  def stats(self) -> dict:
    return {}


class Episodes:
  """Two turns of tokens tagged with the current version; the reward depends on the group id
  and sample only: even groups get 1 for sample 0 and 0 for the others, odd groups all 0."""

  def __init__(self, policy: Generator):
    self.policy = policy

  def __call__(self, task, tid, seed):
    del task, seed
    gid, sample = int(tid[1:8]), int(tid.split("-s")[1])
    v = self.policy.version
    seg = agent.Segment([1, 5, 6], [0, 0, 0], [0.0, 0.0, 0.0], [-1, -1, -1])
    for t in range(2):
      seg.tokens += [7 + t, 9 + sample]
      seg.loss_mask += [1, 1]
      seg.logprobs += [-0.5, -0.7]
      seg.versions += [v, v]
    ep = agent.Episode(tid, [seg], [agent.TurnRecord("a", "shell", None)], "finish")
    r = float(_varies(gid) and sample == 0)
    return Outcome(ep, r, passed=r == 1.0)


def _trainer(workdir, loop: LoopConfig) -> Trainer:
  mesh = single_device_mesh()
  state, shardings = create_train_state(MODEL, TRAIN, mesh, jax.random.key(0))
  gen = Generator()
  _, buf, store, rollouts = h.make(
    workdir, loop, loop.seed, policy=gen, episodes=Episodes(gen), concurrency=4
  )
  return Trainer(
    cfg=loop,
    train_cfg=TRAIN,
    model_cfg=MODEL,
    mesh=mesh,
    state=state,
    state_shardings=shardings,
    generator=gen,
    rollouts=rollouts,
    buffer=buf,
    store=store,
    checkpointer=Checkpointer(workdir / "checkpoints", every_steps=1, keep=10),
    telemetry=Telemetry(workdir, total_steps=loop.steps, tensorboard=False, progress=False),
  )


def _run(workdir, loop: LoopConfig) -> Trainer:
  t = _trainer(workdir, loop)
  try:
    t.run()
  finally:
    t.ckpt.close()
    t.tel.close(plot=False)
  return t


def _batches(store: TrajectoryStore) -> dict[int, tuple[set, set]]:
  """step -> (groups trained fresh, groups replayed), from the store's batch records."""
  t = store.read_batches()
  out: dict[int, tuple[set, set]] = {}
  cols = [t.column(c).to_pylist() for c in ("step", "group_id", "replayed")]
  for step, gid, rep in zip(*cols, strict=True):
    out.setdefault(step, (set(), set()))[int(rep)].add(gid)
  return out


def _expected_replay(store: TrajectoryStore, batches, loop: LoopConfig) -> dict[int, set]:
  """The rule, by hand: at step s (the update from version s - 1) every earlier fresh group
  with varying rewards whose oldest token is at most replay_max_staleness versions old."""
  min_version = {}
  for fresh, _ in batches.values():
    for g in fresh:
      min_version[g] = min(r["min_version"] for r in store.read_group(g))
  out, seen = {}, []
  for s in sorted(batches):
    out[s] = {g for g in seen if (s - 1) - min_version[g] <= loop.replay_max_staleness}
    seen += sorted(g for g in batches[s][0] if _varies(g))
  return out


def test_replay_retrains_recent_groups_with_varying_rewards(tmp_path):
  t = _run(tmp_path, LOOP)
  store = TrajectoryStore(tmp_path)
  batches = _batches(store)
  assert sorted(batches) == [1, 2, 3, 4]
  fresh = set().union(*(f for f, _ in batches.values()))
  # both kinds of group were trained, so the variance filter had something to filter
  assert any(_varies(g) for g in fresh) and not all(_varies(g) for g in fresh), fresh
  replayed = {s: rep for s, (_, rep) in batches.items()}
  assert replayed == _expected_replay(store, batches, LOOP)
  assert replayed[1] == set() and all(replayed[s] for s in (2, 3, 4)), replayed
  # replay_max_staleness cut some: a varied group of step 1 is too old to replay at step 4
  assert (batches[1][0] & {g for g in fresh if _varies(g)}) - replayed[4]
  # the buffer holds every varied fresh group, oldest first (capacity 32 is not reached)
  assert [g.group_id for g in t.replay] == sorted(g for g in fresh if _varies(g))


def test_replay_buffer_round_trips_through_the_checkpoint_and_resume(tmp_path):
  t = _run(tmp_path, LOOP)
  saved = [g.to_json() for g in t.replay]
  assert len(saved) >= 2, saved  # non-empty: one varied group per batch or so

  # the orbax checkpoint of the last step holds the whole buffer, rows and all
  ckpt = Checkpointer(tmp_path / "checkpoints", every_steps=1, keep=10)
  try:
    assert ckpt.latest_step() == LOOP.steps
    _, host = ckpt.restore(t.state)
  finally:
    ckpt.close()
  assert host["replay"] == saved

  # a fresh trainer restores it through Trainer.restore (the checkpoint's host state)
  r = _trainer(tmp_path, LOOP)
  try:
    r.restore()
    assert r.step == LOOP.steps
    assert [g.to_json() for g in r.replay] == saved
    r.restore()  # a second restore replaces the buffer rather than adding to it
    assert [g.to_json() for g in r.replay] == saved
  finally:
    r.ckpt.close()
    r.tel.close(plot=False)

  # resumed for 2 more steps: step 5 replays the groups trained before the resume, which only
  # the restored buffer can hold, exactly as the rule says for an uninterrupted run
  longer = dataclasses.replace(LOOP, steps=LOOP.steps + 2)
  _run(tmp_path, longer)
  store = TrajectoryStore(tmp_path)
  batches = _batches(store)
  assert sorted(batches) == [1, 2, 3, 4, 5, 6]
  replayed = {s: rep for s, (_, rep) in batches.items()}
  assert replayed == _expected_replay(store, batches, longer)
  assert replayed[5] and replayed[5] <= {g["group_id"] for g in saved}, (replayed, saved)
