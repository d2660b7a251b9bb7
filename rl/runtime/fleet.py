"""Rollout workers as Ray actors (`cluster="ray"`): same interface as the in-process path.

The host loop uses two things on the local path: `run_episode(task, trajectory_id, seed,
policy=None) -> Outcome` (envs.episodes.SandboxEpisodes, called by RolloutManager's threads) and
`generator.load_params(params, version)` (called by the Trainer after each update).
`RolloutFleet` is both, so the trainer code does not change:

  fleet = RolloutFleet(RayConfig(...), WorkerSpec(...), params, on_event=telemetry.event)
  out = fleet(task, "g0000001-s00", seed)     # runs on the least-loaded live worker
  fleet.load_params(params, version=3)        # one ray.put, every worker loads the same ref
  fleet.stats()                               # the workers' engine statistics, summed

Each `RolloutWorker` actor holds an engine replica (models.inference.engine + models.inference.generator) and runs
episodes in its own sandboxes (envs.episodes.SandboxEpisodes: bwrap/Docker + verifier), several at
once (a threaded actor). Back-pressure: a request waits until some live worker has fewer than
`max_inflight_per_worker` episodes. Recovery: if a worker dies mid-episode, Ray fails the call
(tasks are never retried by Ray, so nothing runs twice behind our back); the fleet replaces the
actor (with the latest weights) and re-runs the episode on another worker, up to
`max_episode_attempts`; after that the episode comes back as an infrastructure failure, which
the RolloutManager retries or masks (never reward 0). Every attempt is logged by trajectory id
(`fleet.attempts`); worker deaths, retried episodes, replacements and each weight broadcast
(with the version every worker reports back) also go to `on_event` (the run's events.jsonl).
Workers are placed with Ray's SPREAD strategy: across the nodes of a cluster.

A local cluster (`address="local"`) binds every Ray process (GCS, raylet, workers, object
manager) to 127.0.0.1 only: Ray's single-machine mode (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, read
when `ray` is imported) makes 127.0.0.1 the node IP, and Ray's servers bind to the node IP.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import os
import pathlib
import threading
import time

import jax

from envs.agents.agent import AgentConfig
from envs.episodes import infra_outcome
from rl.config import EngineConfig, EnvConfig, RayConfig

_REPO = str(pathlib.Path(__file__).resolve().parents[2])


@dataclasses.dataclass(frozen=True)
class WorkerSpec:
  """What a worker needs to build its replica (rl.runtime.replica): the run's own configs."""

  model_cfg: object  # models.config.ModelConfig
  # "byte", a Hugging Face checkpoint folder present on every node, or the tokenizer itself
  # (pickled to the workers: how a tokenizer trained at start, 'bpe:<vocab>', reaches them).
  tokenizer: object = "byte"
  engine: EngineConfig = EngineConfig(slots=8)
  env: EnvConfig = EnvConfig()
  agent: AgentConfig = AgentConfig()


class RolloutWorker:
  """One rollout worker (run as a Ray actor): engine replica + sandboxed episodes."""

  def __init__(self, name: str, spec: WorkerSpec, params, version: int):
    from rl.runtime.replica import Replica, load_tokenizer

    self.name, self.spec = name, spec
    tok = load_tokenizer(spec.tokenizer) if isinstance(spec.tokenizer, str) else spec.tokenizer
    self.replica = Replica(spec.model_cfg, params, tok, spec.engine, spec.env, spec.agent, version)
    self.gen = self.replica.gen
    self._running: set[str] = set()
    self._lock = threading.Lock()

  def ready(self) -> dict:
    return {"name": self.name, "pid": os.getpid(), "version": self.version()}

  def version(self) -> int:
    return int(self.gen.engine.policy_version)

  def running(self) -> list[str]:
    with self._lock:
      return sorted(self._running)

  def load_params(self, params, version: int) -> int:
    self.gen.load_params(params, version)
    return self.version()

  def engine_stats(self) -> dict:
    return self.gen.stats()

  def run(self, task, trajectory_id: str, seed: int, policy=None, agent_cfg=None):
    """One episode; returns (Outcome, worker name, policy version at the start)."""
    with self._lock:
      self._running.add(trajectory_id)
    episodes = self.replica.episodes(agent_cfg)
    try:
      version = self.version()
      return episodes(task, trajectory_id, seed, policy=policy), self.name, version
    finally:
      with self._lock:
        self._running.discard(trajectory_id)


def init_ray(cfg: RayConfig):
  """Connects to `cfg.address`, or starts a local cluster bound to 127.0.0.1 only."""
  local = cfg.address in ("", "local")
  if local:
    # Read when `ray` is first imported: 127.0.0.1 becomes the node IP all servers bind to.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
  import ray

  if ray.is_initialized():
    return ray
  env = {"PYTHONPATH": os.pathsep.join(p for p in (_REPO, os.environ.get("PYTHONPATH")) if p)}
  if not local:
    ray.init(address=cfg.address, runtime_env={"env_vars": env})
    return ray
  ray.init(
    num_cpus=cfg.num_cpus,
    object_store_memory=cfg.object_store_memory,
    include_dashboard=False,
    _node_ip_address="127.0.0.1",
    runtime_env={"env_vars": env},
  )
  ip = ray.util.get_node_ip_address()
  if ip != "127.0.0.1":
    ray.shutdown()
    raise RuntimeError(
      f"ray_rollout: the local Ray node took IP {ip}, not 127.0.0.1; `ray` was imported before "
      "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 was set (import rl.runtime.fleet first, or "
      "export it)"
    )
  return ray


@dataclasses.dataclass
class _Slot:
  """A worker position in the fleet; its actor is replaced when it dies."""

  index: int
  actor: object = None
  name: str = ""
  generation: int = 0
  ready: bool = False
  running: set = dataclasses.field(default_factory=set)


class RolloutFleet:
  """Driver side: places workers, dispatches episodes, broadcasts weights, recovers."""

  def __init__(self, cfg: RayConfig, spec: WorkerSpec, params, version: int = 0, on_event=None):
    self.cfg, self.spec = cfg, spec
    self.on_event = on_event or (lambda kind, **kw: None)
    self.ray = init_ray(cfg)
    self._actor_cls = self.ray.remote(RolloutWorker).options(
      num_cpus=cfg.worker_num_cpus,
      scheduling_strategy="SPREAD",  # one worker per node before two on any node
      max_restarts=0,
      max_task_retries=0,
      max_concurrency=cfg.max_inflight_per_worker + 4,  # + control calls (load_params, running)
    )
    self._cond = threading.Condition()
    self._closed = False
    self.version = version
    self._params_ref = self.ray.put(jax.device_get(params))
    self.restarts = 0
    self.attempts: list[dict] = []  # every attempt: trajectory id, worker, status, version
    self._inflight: dict[str, int] = {}  # trajectory id -> slot index
    self.completed: collections.Counter = collections.Counter()  # trajectory id -> returns
    self.slots = [_Slot(i) for i in range(cfg.num_workers)]
    for s in self.slots:
      self._start(s)
    self.wait_ready()

  # -- workers ------------------------------------------------------------------------------
  def _start(self, slot: _Slot) -> None:
    """(Re)creates the slot's actor with the latest weights; ready once its engine is built and
    it serves the fleet's current version (a broadcast while it was starting is caught up)."""
    slot.generation += 1
    slot.name = f"worker{slot.index}.{slot.generation}"
    slot.ready = False
    slot.actor = self._actor_cls.remote(slot.name, self.spec, self._params_ref, self.version)
    ping, gen, actor = slot.actor.ready.remote(), slot.generation, slot.actor

    def wait():
      try:
        served = self.ray.get(ping)["version"]
        while True:
          with self._cond:
            if slot.generation != gen:
              return
            if served == self.version:  # load_params targets ready slots: none is missed
              slot.ready = True
              self._cond.notify_all()
              return
            ref, version = self._params_ref, self.version
          served = self.ray.get(actor.load_params.remote(ref, version))
      except Exception:  # noqa: BLE001 -- died while starting: _worker_died decides
        self._worker_died(slot, gen)

    threading.Thread(target=wait, name=f"ray-{slot.name}-ready", daemon=True).start()

  def wait_ready(self, timeout_s: float = 600.0) -> None:
    """Blocks until every worker is live (engine built)."""
    done = lambda: all(s.ready or s.actor is None for s in self.slots)
    with self._cond:
      if not self._cond.wait_for(done, timeout_s):
        raise TimeoutError(f"ray_rollout: workers not ready in {timeout_s}s: {self._fleet()}")
      if any(s.actor is None for s in self.slots):
        raise RuntimeError(
          f"ray_rollout: workers failed to start {self.restarts} times (see the Ray worker logs)"
        )

  def _worker_died(self, slot: _Slot, generation: int) -> None:
    with self._cond:
      if slot.generation != generation:
        return  # already replaced
      slot.ready = False
      rec = dict(worker=slot.name, restarts=self.restarts)
      if self.restarts >= self.cfg.max_worker_restarts:
        slot.actor = None
        self._cond.notify_all()
      else:
        self.restarts += 1
        self.ray.kill(slot.actor, no_restart=True)  # a half-dead actor must not run anything
        self._start(slot)
        rec.update(by=slot.name, restarts=self.restarts)
    self.on_event("ray_worker_replaced" if "by" in rec else "ray_worker_lost", **rec)

  # -- dispatch -----------------------------------------------------------------------------
  def _acquire(self, trajectory_id: str) -> tuple[_Slot | None, int, object]:
    """Waits for a live worker with a free episode slot (back-pressure); registers the episode.

    Returns (slot, its generation, its actor), or (None, 0, None) once the fleet is closed."""
    with self._cond:
      free = lambda: [
        s for s in self.slots if s.ready and len(s.running) < self.cfg.max_inflight_per_worker
      ]
      while not free():
        if self._closed:
          return None, 0, None
        if all(s.actor is None for s in self.slots):
          raise RuntimeError("ray_rollout: every worker died and the restart budget is spent")
        self._cond.wait(1.0)
      slot = min(free(), key=lambda s: (len(s.running), s.index))
      slot.running.add(trajectory_id)
      self._inflight[trajectory_id] = slot.index
      return slot, slot.generation, slot.actor

  def _release(self, slot: _Slot, trajectory_id: str) -> None:
    with self._cond:
      slot.running.discard(trajectory_id)
      self._cond.notify_all()

  def __call__(self, task, trajectory_id: str, seed: int, policy=None, agent_cfg=None):
    """Runs one episode on the fleet; returns an envs.episodes.Outcome (see module docstring)."""
    from ray.exceptions import RayActorError

    t0, errors = time.monotonic(), []
    with self._cond:  # one run per trajectory id at a time: a duplicate request is a caller bug
      if trajectory_id in self._inflight:
        raise ValueError(f"ray_rollout: episode {trajectory_id} is already running")
      self._inflight[trajectory_id] = -1
    try:
      for attempt in range(self.cfg.max_episode_attempts):
        slot, gen, actor = self._acquire(trajectory_id)
        if slot is None:
          return self._infra_outcome(trajectory_id, errors, t0, closed=True)
        rec = dict(trajectory_id=trajectory_id, attempt=attempt, worker=slot.name)
        try:
          ref = actor.run.remote(task, trajectory_id, seed, policy, agent_cfg)
          out, name, version = self.ray.get(ref)
        except RayActorError as e:
          self._release(slot, trajectory_id)
          if self._closed:  # close() killed it: the run is over, this is no worker failure
            return self._infra_outcome(trajectory_id, errors, t0, closed=True)
          self._worker_died(slot, gen)
          errors.append(f"{rec['worker']}: {type(e).__name__}")
          self._log(rec, status="worker_died")
          self.on_event("ray_worker_died", **rec)
          continue
        self._release(slot, trajectory_id)
        self._log(rec, status="ok", version=version)
        if attempt:
          self.on_event("ray_episode_retried", **rec, version=version)
        return out
      return self._infra_outcome(trajectory_id, errors, t0)
    finally:
      with self._cond:
        self._inflight.pop(trajectory_id, None)
        self.completed[trajectory_id] += 1

  def _log(self, rec: dict, **kw) -> None:
    with self._cond:
      self.attempts.append({**rec, **kw})

  @staticmethod
  def _infra_outcome(trajectory_id: str, errors: list[str], t0: float, closed: bool = False):
    msg = f"RayWorkerDied: {len(errors)} attempts failed ({'; '.join(errors)})"
    if closed:
      msg = f"RolloutFleet closed during the episode (earlier attempts: {errors})"
    return infra_outcome(trajectory_id, msg, t0)

  def with_agent(self, agent_cfg):
    """A run_episode callable with other agent settings (e.g. greedy for evaluation)."""
    return lambda task, tid, seed, policy=None: self(task, tid, seed, policy, agent_cfg)

  def run_many(self, requests, workers: int | None = None) -> dict:
    """Runs [(task, trajectory_id, seed), ...] concurrently; returns {trajectory_id: Outcome}."""
    n = workers or self.cfg.num_workers * self.cfg.max_inflight_per_worker
    with concurrent.futures.ThreadPoolExecutor(n, thread_name_prefix="ray-episode") as ex:
      futs = {tid: ex.submit(self, task, tid, seed) for task, tid, seed in requests}
      return {tid: f.result() for tid, f in futs.items()}

  # -- weights --------------------------------------------------------------------------------
  def load_params(self, params, version: int) -> None:
    """Broadcasts new weights: one ray.put, every live worker loads the same object ref.

    A worker that dies meanwhile is replaced from the same ref. Returns when every live worker
    serves `version`.
    """
    ref = self.ray.put(jax.device_get(params))
    with self._cond:
      self._params_ref, self.version = ref, int(version)
      targets = [(s, s.generation) for s in self.slots if s.ready]
    from ray.exceptions import RayActorError

    served = {}
    for slot, gen in targets:
      try:
        served[slot.name] = self.ray.get(slot.actor.load_params.remote(ref, int(version)))
      except RayActorError:
        self._worker_died(slot, gen)
    self.on_event("ray_weights", version=int(version), workers=served)

  def _ask(self, method: str) -> dict:
    with self._cond:
      live = [s for s in self.slots if s.ready]
    answers = self.ray.get([getattr(s.actor, method).remote() for s in live])
    return {s.name: a for s, a in zip(live, answers, strict=True)}

  def worker_versions(self) -> dict[str, int]:
    """Policy version each live worker serves (asked of the workers themselves)."""
    return self._ask("version")

  def running(self) -> dict[str, list[str]]:
    """Episodes each live worker is executing right now (asked of the workers)."""
    return self._ask("running")

  def _fleet(self) -> dict:
    with self._cond:
      return {
        "version": self.version,
        "restarts": self.restarts,
        "workers": {s.name: {"ready": s.ready, "running": len(s.running)} for s in self.slots},
      }

  def stats(self) -> dict:
    """The live workers' engine statistics (models.inference.generator.Generator.stats) summed, with the
    fleet's version, restarts and per-worker load; a worker that dies meanwhile is left out."""
    from ray.exceptions import RayActorError

    with self._cond:
      live = [s for s in self.slots if s.ready]
    total: collections.Counter = collections.Counter()
    for ref in [s.actor.engine_stats.remote() for s in live]:
      try:
        total.update({k: v for k, v in self.ray.get(ref).items() if k != "policy_version"})
      except RayActorError:
        continue
    return {**total, **self._fleet()}

  def close(self) -> None:
    """Kills the workers (their sandboxes die with them: bwrap --die-with-parent); episodes still
    running or waiting come back as infrastructure failures ("RolloutFleet closed ...")."""
    with self._cond:
      self._closed = True
      actors = [s.actor for s in self.slots if s.actor is not None]
      for s in self.slots:
        s.actor, s.ready = None, False
        s.generation += 1
      self._cond.notify_all()
    for a in actors:
      self.ray.kill(a, no_restart=True)


def from_experiment(exp, model_cfg, params, on_event=None, tokenizer=None) -> RolloutFleet:
  """The fleet for an rl.config.Experiment with `cluster="ray"` (config: `exp.ray`);
  `tokenizer`: the run's loaded tokenizer, sent to the workers (default: `exp.tokenizer`)."""
  tok = exp.tokenizer if tokenizer is None else tokenizer
  spec = WorkerSpec(model_cfg, tok, exp.engine, exp.env, exp.agent)
  return RolloutFleet(exp.ray, spec, params, on_event=on_event)
