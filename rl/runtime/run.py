"""A run end to end: tokenizer, model, mesh, replica or Ray fleet, tasks; warm start; RL loop.

`run(Experiment(...), workdir)` is what `python -m launch.train` and the notebook call; the
configs are rl.config's. A workdir that already holds checkpoints is resumed (the warm start,
rl.warm_start, is then skipped).

Tasks: `env.tasks = "procedural:<family>"` draws fresh training tasks from a seeded family
(group i gets seed hash(seed, i)); held-out evaluation uses `env.eval_tasks` tasks from seeds
offset by `env.eval_seed`, never used in training. A folder of tasks is used through
`envs.task_pool.TaskPool` (difficulty strata, quarantine), the held-out split by `env.eval_tasks`
(rl.runtime.task_sources).

In a multi-process job (`jax.distributed`) process 0 does all of the host work above and the
other processes only follow its device work on the shared mesh (rl.runtime.multihost).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib
import signal
import time

import jax
import numpy as np

from parallel.mesh import make_mesh
from rl.config import Experiment, drop_retired
from rl.rft import update_config, update_temperature
from rl.runtime import multihost
from rl.runtime.buffer import StalenessBuffer
from rl.runtime.checkpoint import Checkpointer
from rl.runtime.evaluation import evaluate
from rl.runtime.export import CheckpointError, pick_step, resolve_checkpoint
from rl.runtime.replica import Replica, load_tokenizer, tokenizer_corpus
from rl.runtime.rollout import RolloutManager
from rl.runtime.task_sources import make_task_source, parse_mixed, parse_split
from rl.runtime.telemetry import Telemetry
from rl.runtime.trainer import Trainer
from rl.runtime.trajectory_store import TrajectoryStore
from rl.runtime.warm_checkpoints import WarmCheckpoints
from rl.train_step import make_train_step
from rl.warm_start import demo_slot_ids, demonstrations, rl_state, warm_start


def training_mesh(exp: Experiment):
  """The training mesh of `exp` (its first `devices` devices, or all)."""
  devices = jax.devices()[: exp.devices] if exp.devices else None
  return make_mesh(exp.train.mesh, devices)


def _initial_params(exp: Experiment, tok):
  """The model config and host params to start from: a checkpoint or a seeded init."""
  if exp.checkpoint:
    from models.io import hf

    # Remat is a run-time choice, not the checkpoint's (model.remat; the rest comes from it).
    # Another run's workdir starts from its latest checkpoint (exported once, LoRA merged).
    return hf.load(resolve_checkpoint(exp.checkpoint), remat=exp.model.remat)
  from models import transformer

  if tok is not None and exp.model.vocab_size < tok.vocab_size:
    raise ValueError(f"model.vocab_size {exp.model.vocab_size} < tokenizer's {tok.vocab_size}")
  return exp.model, jax.device_get(transformer.init(exp.model, jax.random.key(exp.loop.seed)))


def preflight(exp: Experiment) -> None:
  """Checks what a run needs before anything is written: values, tasks, backend, checkpoint,
  tokenizer and the training mesh on this machine's devices. Raises ValueError (one line)."""
  exp.validate()
  check_names(exp)
  from models.io import checkpoints  # a named checkpoint (smollm2-135m-instruct): its folder

  ckpt = checkpoints.resolve(exp.checkpoint) if exp.checkpoint else None
  if ckpt and not ((ckpt / "config.json").is_file() or (ckpt / "experiment.json").is_file()):
    raise ValueError(
      f"checkpoint: {exp.checkpoint}: not an HF folder (no config.json) or a run's workdir "
      "(no experiment.json)"
    )
  if ckpt and (ckpt / "experiment.json").is_file():
    try:
      pick_step(ckpt)
    except CheckpointError as e:
      raise ValueError(f"checkpoint: {e}") from None
  tok = exp.tokenizer
  if not (
    tok == "byte"
    or tok.startswith("bpe:")
    or (checkpoints.resolve(tok) / "tokenizer.json").is_file()
  ):
    raise ValueError(
      f"tokenizer: {tok!r} is not 'byte', 'bpe:<vocab size>' or a folder with tokenizer.json"
    )
  if exp.devices > jax.device_count():
    raise ValueError(f"devices={exp.devices}: this machine has {jax.device_count()}")
  try:
    training_mesh(exp)
  except (ValueError, AssertionError) as e:
    raise ValueError(f"train.mesh: {e}") from None


def _one_of(field: str, value: str, known, what: str) -> None:
  if value not in known:
    import difflib

    close = difflib.get_close_matches(value, list(known), 1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ValueError(f"{field}: {value!r} is not one of {', '.join(sorted(known))} ({what}){hint}")


def check_names(exp: Experiment) -> None:
  """Every name a run looks up later (registries, backend, task source, procedural family,
  built-in suite, verifier mode, harness) checked now, before the warm start or a workdir."""
  from envs import procedural
  from envs import sandbox as sandbox_lib
  from envs.task import BUILTIN_DIR
  from rl import advantages, losses, registry  # noqa: F401  (importing registers the names)

  loss, env = exp.train.loss, exp.env
  for reg, value, field in (
    (registry.ADVANTAGES, loss.advantage, "train.loss.advantage"),
    (registry.POLICY_LOSSES, loss.policy_loss, "train.loss.policy_loss"),
    (registry.KL_ESTIMATORS, loss.kl, "train.loss.kl"),
    (registry.AGGREGATIONS, loss.aggregation, "train.loss.aggregation"),
  ):
    known = [*reg.names(), "none"] if field.endswith(".kl") else reg.names()
    _one_of(field, value, known, reg.kind)
  _one_of("env.backend", env.backend, sandbox_lib.BACKENDS, "sandbox backend")
  _one_of("env.verifier_mode", env.verifier_mode, ("after", "fresh"), "verifier mode")
  if exp.agent.kind == "external" and ":" not in exp.agent.harness:
    raise ValueError(f"agent.harness: {exp.agent.harness!r} is not 'module:function'")
  if env.tasks.startswith("procedural:"):
    family = env.tasks.split(":", 1)[1]
    _one_of("env.tasks", family, procedural.FAMILIES, "procedural family")
  elif env.tasks.startswith("mixed:"):
    suites = sorted(p.name for p in BUILTIN_DIR.iterdir() if p.is_dir())
    for name, _ in parse_mixed(env.tasks)[1]:
      _one_of("env.tasks", name, suites, "built-in suite")
  elif env.tasks.startswith("split:"):
    parse_split(env.tasks)
  elif not pathlib.Path(env.tasks).is_dir():
    raise ValueError(
      f"env.tasks: {env.tasks}: no such folder (or use 'procedural:<family>' or "
      "'mixed:<family>,...+<suite><=<difficulty>')"
    )


def flat_config(d: dict, prefix: str = "") -> dict:
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(flat_config(v, f"{prefix}{k}."))
    else:
      out[f"{prefix}{k}"] = list(v) if isinstance(v, tuple) else v
  return out


def config_diff(stored: dict, exp: Experiment) -> dict[str, tuple]:
  """{field: (stored value, new value)} between a stored experiment.json and `exp` (fields
  retired since it was written, rl.config.RETIRED, compared through their owners)."""
  new = flat_config(json.loads(json.dumps(dataclasses.asdict(exp), default=str)))
  old = flat_config(drop_retired(stored, "experiment.json"))
  return {
    k: (old.get(k), new.get(k)) for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)
  }


def record_experiment(
  wd: pathlib.Path, exp: Experiment, resuming: bool, override: bool, say
) -> None:
  """Writes experiment.json; on a resume, refuses a changed config unless `override` (then the
  old record is kept as experiment-<n>.json and the change is reported)."""
  file = wd / "experiment.json"
  text = json.dumps(dataclasses.asdict(exp), indent=1, default=str)
  if resuming and file.is_file():
    diff = config_diff(json.loads(file.read_text()), exp)
    if not diff:
      return
    lines = ", ".join(f"{k}: {a!r} -> {b!r}" for k, b_a in diff.items() for a, b in [b_a])
    if not override:
      raise ConfigChanged(
        f"{file}: the config differs from the run being resumed ({lines}); rerun with the "
        "stored config, use a new --workdir, or pass --override_config to continue with it"
      )
    shape = shape_change(json.loads(file.read_text()), exp, diff)
    if shape:  # refused before anything in the workdir changes
      raise ConfigChanged(f"model shape changed: {shape}; these weights cannot be restored")
    n = 1 + len(list(wd.glob("experiment-*.json")))
    file.rename(wd / f"experiment-{n}.json")
    say(f"config changed ({lines}); the old record is {wd / f'experiment-{n}.json'}")
  file.write_text(text)


def shape_change(stored: dict, exp: Experiment, diff: dict) -> str:
  """The changed fields ('model.d_model 96 -> 128') when the weights of the run recorded in
  `stored` do not fit `exp`'s (other parameter shapes or LoRA adapters); '' when they do."""
  from models import transformer
  from rl.config import from_config
  from rl.runtime.export import model_config

  keys = [k for k in diff if k.startswith(("model.", "train.lora.")) or k == "checkpoint"]
  if not keys:
    return ""
  try:
    old = from_config(Experiment, stored, "experiment.json")
    cfgs = (model_config(old), model_config(exp))
  except (ValueError, OSError):
    return ""  # an old record or a base checkpoint gone: restore itself will say
  shapes = [
    jax.tree.map(lambda x: x.shape, jax.eval_shape(transformer.init, c, jax.random.key(0)))
    for c in cfgs
  ]
  lora = [(e.train.lora.rank, e.train.lora.targets) for e in (old, exp)]
  if shapes[0] == shapes[1] and lora[0] == lora[1]:
    return ""
  return ", ".join(f"{k} {diff[k][0]!r} -> {diff[k][1]!r}" for k in keys)


class ConfigChanged(ValueError):
  """Resuming a workdir with a config that differs from its experiment.json."""


def run(exp: Experiment, workdir: str, *, task_source=None, override_config: bool = False) -> dict:
  """Runs (or resumes) the experiment in `workdir`; returns a summary (also summary.json).

  `task_source(workdir, on_event) -> (source, eval_tasks)` replaces `env.tasks` (bring your own
  task source: `task_for(group_id)`, `get(task_id)`, `demo_tasks(n)`, `observe_batch(groups)`,
  `state_dict()`, `load_state_dict(d)`, as ProceduralTasks and PoolTasks implement).
  """
  preflight(exp)
  comm = (
    multihost.channel()
  )  # multi-process: only process 0 does host work (rl/runtime/multihost.py)
  if comm.multi and exp.devices not in (0, jax.device_count()):
    raise ValueError(f"devices={exp.devices}: a multi-process run trains on all devices (0)")
  try:
    return _run(exp, workdir, task_source, comm, override_config)
  except BaseException:
    comm.abort()  # process 0 failed: the others raise instead of waiting for it
    raise


def _run(exp: Experiment, workdir: str, task_source, comm, override: bool) -> dict:
  wd = pathlib.Path(workdir)
  t_start = time.monotonic()
  wd.mkdir(parents=True, exist_ok=True)
  ckpt = Checkpointer(
    wd / "checkpoints", every_steps=exp.loop.checkpoint_every, keep=exp.loop.keep_checkpoints
  )
  ckpt.install_signal_handlers((signal.SIGTERM, signal.SIGINT))
  latest = ckpt.latest_step()
  resuming = latest is not None
  if not comm.leader:
    return _follow(exp, ckpt, comm, resuming)
  warm = WarmCheckpoints(wd, exp.sft.checkpoint_every_s)
  try:
    record_experiment(wd, exp, resuming or warm.exists(), override, print)
  except ConfigChanged:
    ckpt.close()
    raise
  if resuming and latest >= exp.loop.steps and (wd / "summary.json").is_file():
    ckpt.close()
    print(f"already complete: {wd} trained {latest} of {exp.loop.steps} steps (summary.json)")
    return {**json.loads((wd / "summary.json").read_text()), "already_complete": True}
  if resuming:
    print(f"resumed from step {latest} of {exp.loop.steps} ({wd / 'checkpoints'})")
  tel = Telemetry(wd, total_steps=exp.loop.steps, initial_step=latest or 0)
  if task_source is None:
    tasks, eval_tasks = make_task_source(exp.env, exp.loop.seed, wd, tel.event)
  else:
    tasks, eval_tasks = task_source(wd, tel.event)
  corpus = functools.partial(tokenizer_corpus, tasks, 2000, exp.env.system_prompt)
  tok = load_tokenizer(exp.tokenizer, wd, corpus)
  model_cfg, params = _initial_params(exp, tok)
  mesh = training_mesh(exp)
  replica = Replica(model_cfg, params, tok, exp.engine, exp.env, exp.agent)
  gen, episodes, mk_eps = replica.gen, replica.episodes(), replica.episodes
  if exp.cluster == "ray":  # rollout workers as Ray actors; same interface as gen/episodes
    from rl.runtime import fleet

    replica.close()
    if exp.tokenizer.startswith("bpe:"):  # actors read the trained tokenizer's folder
      exp = dataclasses.replace(exp, tokenizer=str(wd / "tokenizer"))
    gen = fleet.from_experiment(exp, model_cfg, params, on_event=tel.event, tokenizer=tok)
    episodes, mk_eps = gen, gen.with_agent
  try:
    sft = None  # the warm start's TrainState, if it runs
    if exp.sft.steps and not resuming:
      demos, pad_id = _warm_demos(exp, tasks, episodes, tok, tel, comm, warm)
      tel.phase("warm start steps", total=exp.sft.steps)
      stop = None if comm.multi else (lambda: ckpt.preempted)  # one process: stop at once
      saves = None if comm.multi else warm
      sft = warm_start(exp, model_cfg, mesh, params, demos, tel, pad_id, comm, stop, saves)
      tel.phase(None)
      warm.close()
      if ckpt.preempted:  # saved in WORKDIR/warm_start: the next run resumes it
        tel.close(plot=False)
        return {"step": 0, "preempted": True, "workdir": str(wd), "in_warm_start": True}
    state, shardings = rl_state(exp, model_cfg, mesh, params, sft)
    eval_agent = dataclasses.replace(exp.agent, greedy=exp.env.eval_greedy)
    eval_fn = functools.partial(
      evaluate, mk_eps(eval_agent), eval_tasks, workers=exp.rollout.max_concurrency
    )
    buffer = StalenessBuffer(exp.loop.batch_groups, exp.loop.staleness, exp.loop.token_staleness)
    store = TrajectoryStore(wd)
    rollouts = RolloutManager(
      dataclasses.replace(exp.rollout, seed=exp.loop.seed),
      run_episode=episodes,
      tasks=tasks,
      buffer=buffer,
      store=store,
      on_event=tel.event,
    )
    make_trainer = Trainer
    if comm.multi:
      make_trainer = functools.partial(multihost.LeaderTrainer, channel=comm)
    trainer = make_trainer(
      cfg=exp.loop,
      train_cfg=update_config(exp.loop.algorithm, exp.train),  # RFT: the supervised loss
      model_cfg=model_cfg,
      mesh=mesh,
      state=state,
      state_shardings=shardings,
      generator=gen,
      rollouts=rollouts,
      buffer=buffer,
      store=store,
      checkpointer=ckpt,
      telemetry=tel,
      evaluate=eval_fn if exp.env.eval_tasks else None,
      on_batch=tasks.observe_batch,
      pad_id=tok.pad_id,
      # one owner: the rollouts sample at it, GRPO's loss scores at it (RFT's at 1)
      temperature=update_temperature(exp.loop.algorithm, exp.agent.temperature),
    )
    history = trainer.run()
    extra = comm.finish(trainer.state)  # multi-process: stops the others, compares replicas
  except BaseException:
    tel.close(plot=False)  # the progress bar ends before the error's line
    raise
  finally:
    gen.close()
    ckpt.close()
    warm.close()
  if ckpt.latest_step() is not None:
    warm.remove()  # RL's checkpoints hold the run now
  plots = tel.close()
  summary = {**_summary(history, trainer.step, trainer.ckpt.preempted, plots), **extra}
  summary["wall_s"] = round(time.monotonic() - t_start, 1)
  summary["workdir"] = str(wd)
  if not summary["preempted"]:  # a preempted run is not finished: no summary.json yet
    (wd / "summary.json").write_text(json.dumps(summary, indent=1))
  return summary


def _warm_demos(exp, tasks, episodes, tok, tel, comm, warm) -> tuple[list[dict], int]:
  """The warm start's demonstrations: the saved ones of a warm start being resumed, else the
  teacher's replayed in sandboxes (then saved: WORKDIR/warm_start/demos.json)."""
  saved = None if comm.multi else warm.load_demos()
  if saved is not None:
    tel.write(f"[sft] {len(saved)} demonstrations from {warm.dir / 'demos.json'}")
    return saved, tok.pad_id
  t0 = time.monotonic()
  demo_tasks = tasks.demo_tasks(exp.sft.demos)
  tel.phase(f"demonstrations ({len(demo_tasks)} tasks)")
  demos = demonstrations(
    demo_tasks, episodes, tok, exp.rollout.max_concurrency, exp.sft.teacher_accuracy,
    exp.sft.seed, exp.agent.protocol, budget=exp.agent, say=tel.write,
    refuse=getattr(tasks, "no_demo_families", frozenset()),  # SplitTasks: N and U
  )  # fmt: skip
  passed = sum(d["passed"] for d in demos)
  n, of = len(demos), len(demo_tasks)
  tel.event("demonstrations", n=n, of=of, passed=passed, time_s=time.monotonic() - t0)
  tel.write(f"[sft] {n} demonstrations of {of} tasks, {passed} pass the verifier")
  demos, pad_id = _shared_demos(comm, demos, tok.pad_id)
  if not comm.multi:
    warm.save_demos(demos)
  return demos, pad_id


def _shared_demos(comm, demos: list[dict] | None, pad_id: int | None) -> tuple[list[dict], int]:
  """Process 0's demonstrations and pad id, the same on every process (one process: as is)."""
  if not comm.multi:
    return demos, pad_id
  seqs, head = demos, None  # a follower has no demos and no pad id: the leader's are shared
  if comm.leader:
    seqs = [
      {
        "tokens": np.asarray(d["tokens"], np.int32),
        "loss_mask": np.asarray(d["loss_mask"], np.float32),
      }
      for d in demos
    ]
    n_slots, slot_ids = demo_slot_ids(demos)
    head = {
      "pad_id": np.int32(pad_id),
      "slots": np.int64(n_slots),
      "slot": np.asarray(slot_ids, np.int64),
    }
  head = comm.share(head)
  seqs = multihost.share_sequences(comm, seqs, ("tokens", "loss_mask"))
  for seq, slot in zip(seqs, head["slot"], strict=True):  # the leader's draw, on every process
    seq["slot"], seq["slots"] = int(slot), int(head["slots"])
  return seqs, int(head["pad_id"])


def _follow(exp: Experiment, ckpt: Checkpointer, comm, resuming: bool) -> dict:
  """A process other than 0 of a multi-process run: process 0's device work, no host work."""
  try:
    comm.watch(lambda: ckpt.preempted)
    model_cfg, params = _initial_params(exp, None)
    mesh = training_mesh(exp)
    sft = None
    if exp.sft.steps and not resuming:
      demos, pad_id = _shared_demos(comm, None, None)
      sft = warm_start(exp, model_cfg, mesh, params, demos, None, pad_id, comm)
    state, shardings = rl_state(exp, model_cfg, mesh, params, sft)
    train_cfg = update_config(exp.loop.algorithm, exp.train)
    make_step = functools.partial(
      make_train_step,
      model_cfg,
      train_cfg,
      mesh,
      shardings,
      temperature=update_temperature(exp.loop.algorithm, exp.agent.temperature),
    )
    state, extra = multihost.follow(comm, state, make_step, ckpt, mesh, train_cfg)
  finally:
    ckpt.close()
  return {"step": int(state.step), "process": jax.process_index(), **extra}


def _summary(history: list[dict], step: int, preempted: bool, plots) -> dict:
  evals = [h for h in history if "eval/pass_rate/overall" in h]
  return {
    "step": step,
    "preempted": preempted,
    "eval_first": evals[0]["eval/pass_rate/overall"] if evals else None,
    "eval_last": evals[-1]["eval/pass_rate/overall"] if evals else None,
    "evals": [(h["step"], h["eval/pass_rate/overall"]) for h in evals],
    "train_pass_rate": [
      (h["step"], h["pass_rate/overall"]) for h in history if "pass_rate/overall" in h
    ],
    "plots": [str(p) for p in plots],
  }
