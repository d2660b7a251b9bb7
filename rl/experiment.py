"""An experiment end to end: build tokenizer, model, mesh, engine, tasks; SFT warm start; RL loop.

`run(Experiment(...), workdir)` is what `python -m launch.train` and the notebook call. Every
part is a frozen dataclass (launch/ converts the ml_collections config into these). A workdir
that already holds checkpoints is resumed (the warm start is then skipped).

Tasks: `env.tasks = "procedural:<family>"` draws fresh training tasks from a seeded family
(group i gets seed hash(seed, i)); held-out evaluation uses `env.eval_tasks` tasks from seeds
offset by `env.eval_seed`, never used in training. A folder of tasks is used through
`envs.task_pool.TaskPool` (difficulty strata, quarantine), the held-out split by `env.eval_tasks`.

Warm start (`sft.steps > 0`): demonstrations are the tasks' reference actions replayed by
`envs.agent.ScriptedPolicy` through the real agent loop in real sandboxes and kept only if the
verifier passes them; SFT reuses the jitted GRPO step with advantage 1 and no behaviour
logprobs (on-policy, ratio 1), whose gradient is exactly the token-mean cross-entropy's.

In a multi-process job (`jax.distributed`) process 0 does all of the host work above and the
other processes only follow its device work on the shared mesh (rl/multihost.py).
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import json
import pathlib
import time
import types
import typing

import jax
import numpy as np

from envs import agent as agent_lib
from models.config import ModelConfig
from rl import multihost
from rl.buffer import StalenessBuffer
from rl.checkpoint import Checkpointer
from rl.config import LossConfig, OptimConfig, TrainConfig
from rl.loop import LoopConfig, Trainer, _bucket_rows
from rl.ray_rollout import RayConfig
from rl.rollout import RolloutConfig, RolloutManager, SandboxEpisodes, evaluate
from rl.task_sources import PoolTasks, ProceduralTasks, make_task_source  # noqa: F401 (re-exported)
from rl.telemetry import Telemetry
from rl.trajectory_store import TrajectoryStore


@dataclasses.dataclass(frozen=True)
class EnvConfig:
  tasks: str = "procedural:file_word"  # "procedural:<family>" or a folder of task folders
  backend: str = "bwrap"  # bwrap | docker
  image: str = "default"
  eval_tasks: int = 32  # held-out tasks evaluated at the start, every eval_every, and the end
  eval_seed: int = 1_000_003  # held-out seeds / split seed (never used for training tasks)
  eval_greedy: bool = True
  train_pool_size: int = 0  # procedural only: > 0 trains on that many fixed tasks (toy runs)
  system_prompt: str = agent_lib.DEFAULT_SYSTEM_PROMPT
  verifier_mode: str = "after"  # after | fresh


@dataclasses.dataclass(frozen=True)
class SFTConfig:
  steps: int = 0  # 0: no warm start
  batch_size: int = 16  # sequences per step
  lr: float = 1e-3
  warmup_steps: int = 0
  end_lr_ratio: float = 1.0  # cosine decay from lr to lr * this over the steps (1: constant)
  demos: int = 64  # demonstration episodes (real sandboxes, verified)
  seed: int = 7
  log_every: int = 10
  # Entropy bonus (loss -= coef * entropy per token): > 0 leaves a broad policy whose samples
  # err now and then while its mode is right (the demo's warm start; GRPO then sharpens it).
  entropy_coef: float = 0.0
  # RL starts from the warm start's AdamW second moments (nu, count) instead of fresh ones: a
  # fresh Adam's first steps move every parameter by about lr (update ~ sign of the gradient);
  # carried, nu keeps the per-parameter scale the supervised steps measured. The first moments
  # start at zero, so no supervised direction carries on into the RL steps.
  carry_moments: bool = False
  # A noisy teacher: this fraction of demonstrations replay the task's reference command, the
  # rest one of its `teacher_mistakes` (plausible wrong commands, metadata of the procedural
  # families), and every demonstration is kept whatever its grade. 1.0: the reference only,
  # and only the ones the verifier passes are kept.
  teacher_accuracy: float = 1.0

  def __post_init__(self):
    if not 0.0 < self.teacher_accuracy <= 1.0:
      raise ValueError(f"sft.teacher_accuracy must be in (0, 1], got {self.teacher_accuracy}")


@dataclasses.dataclass(frozen=True)
class EngineConfig:
  slots: int = 32  # concurrent decodes
  max_seq_len: int = 512
  page_size: int = 16


@dataclasses.dataclass(frozen=True)
class Experiment:
  model: ModelConfig = ModelConfig()
  tokenizer: str = "byte"  # "byte" or a Hugging Face checkpoint folder
  checkpoint: str = ""  # a Hugging Face checkpoint folder to start from ("": random init)
  devices: int = 0  # devices for the training mesh (0: all)
  train: TrainConfig = TrainConfig()
  sft: SFTConfig = SFTConfig()
  agent: agent_lib.AgentConfig = agent_lib.AgentConfig()
  rollout: RolloutConfig = RolloutConfig()
  loop: LoopConfig = LoopConfig()
  env: EnvConfig = EnvConfig()
  engine: EngineConfig = EngineConfig()
  cluster: str = "local"  # local | ray (rollout workers as Ray actors, rl/ray_rollout.py)
  ray: RayConfig = RayConfig()

  def validate(self) -> None:
    if self.cluster not in ("local", "ray"):
      raise ValueError(f"cluster: must be 'local' or 'ray', got {self.cluster!r}")
    a = self.agent
    if a.greedy or a.temperature != 1.0 or a.top_k or a.top_p != 1.0:
      raise ValueError(
        "agent: training rollouts must sample at temperature 1 without top-k/top-p (the "
        "trainer's log-probs are of the unmodified policy); use env.eval_greedy for eval"
      )
    if self.engine.max_seq_len > self.loop.row_len:
      raise ValueError(
        f"engine.max_seq_len {self.engine.max_seq_len} > loop.row_len {self.loop.row_len}"
      )
    if a.max_context_tokens > self.engine.max_seq_len:
      raise ValueError(
        f"agent.max_context_tokens {a.max_context_tokens} > engine.max_seq_len {self.engine.max_seq_len}"
      )


# ---------------------------------------------------------------- configs


def _convert(tp, value, path: str):
  """A config value -> the field type `tp` (dataclasses recursively, lists -> tuples)."""
  if dataclasses.is_dataclass(tp):
    return from_config(tp, value, path)
  origin = typing.get_origin(tp)
  if origin in (typing.Union, types.UnionType):
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    return None if value is None else _convert(args[0], value, path)
  if origin is tuple and isinstance(value, (list, tuple)):
    args = typing.get_args(tp)
    inner = args[0] if args and (len(args) == 2 and args[1] is Ellipsis) else None
    return tuple(
      _convert(inner, v, f"{path}[{i}]") if inner else _plain(v) for i, v in enumerate(value)
    )
  if tp is float and isinstance(value, int) and not isinstance(value, bool):
    return float(value)
  return _plain(value)


def _plain(v):
  if isinstance(v, list):
    return tuple(_plain(x) for x in v)
  return v


def from_config(cls, config, path: str = "config"):
  """Builds the frozen dataclass `cls` from a ConfigDict/dict; unknown keys are errors."""
  data = config.to_dict() if hasattr(config, "to_dict") else dict(config)
  hints = typing.get_type_hints(cls)
  names = {f.name for f in dataclasses.fields(cls)}
  unknown = sorted(set(data) - names)
  if unknown:
    raise ValueError(
      f"{path}: unknown field(s) {unknown} of {cls.__name__}; known: {sorted(names)}"
    )
  kwargs = {k: _convert(hints[k], v, f"{path}.{k}") for k, v in data.items()}
  try:
    return cls(**kwargs)
  except (TypeError, ValueError) as e:
    raise ValueError(f"{path}: {e}") from e


def to_experiment(config) -> Experiment:
  """An ml_collections config (configs/*.py) -> Experiment."""
  return from_config(Experiment, config)


def load_tokenizer(spec: str, workdir=None, corpus=None):
  """ "byte", "bpe:<vocab size>" (trained on `corpus()` once, kept in WORKDIR/tokenizer) or a
  Hugging Face checkpoint folder."""
  if spec == "byte":
    from models.tokenizer import ByteTokenizer

    return ByteTokenizer()
  from models import hf

  if spec.startswith("bpe:"):
    from models.tokenizer import save_tokenizer, train_bpe

    try:
      vocab = int(spec.split(":", 1)[1])
    except ValueError:
      raise ValueError(f"tokenizer: {spec!r} must be 'bpe:<vocab size>', e.g. 'bpe:512'") from None
    if workdir is None or corpus is None:
      raise ValueError(f"tokenizer {spec!r} needs a workdir and a corpus (experiment.run)")
    path = pathlib.Path(workdir) / "tokenizer"
    if not (path / "tokenizer.json").is_file():  # trained once; a resumed run reads it back
      save_tokenizer(train_bpe(corpus(), vocab), path)
    return hf.load_tokenizer(path)
  return hf.load_tokenizer(spec)


def tokenizer_corpus(tasks, n: int, system_prompt: str) -> list[str]:
  """Texts a from-scratch tokenizer is trained on: instructions, reference actions, formats."""
  pick = getattr(tasks, "corpus_tasks", tasks.demo_tasks)
  texts = [system_prompt, agent_lib.format_tool_call("finish")]
  texts += [agent_lib.format_exec_observation(c, "out", "err") for c in (0, 1, 2, 124)]
  for t in pick(n):
    texts.append(t.instruction)
    acts = dict(t.metadata).get("demo_actions") or [
      agent_lib.format_tool_call("shell", command=t.solution_script.strip())
    ]
    texts.extend(acts)
  return texts


def _mesh(exp: Experiment):
  from parallel.mesh import make_mesh

  devices = jax.devices()[: exp.devices] if exp.devices else None
  return make_mesh(exp.train.mesh, devices)


def _row_multiple(mesh, micro_batches: int) -> int:
  return int(np.prod([mesh.shape[a] for a in ("data", "fsdp", "expert")])) * micro_batches


def demonstrations(
  tasks, episodes: SandboxEpisodes, tok, workers: int, teacher_accuracy: float = 1.0, seed: int = 0
) -> list[dict]:
  """Teacher actions replayed through the agent loop in real sandboxes, with their grade.

  The teacher replays each task's reference command (or `demo_actions`); with
  `teacher_accuracy` < 1 a seeded share of tasks gets one of the task's `teacher_mistakes`
  instead and every demonstration is kept (`passed` says which the verifier passed);
  otherwise only passing ones are kept.
  """
  rng = np.random.default_rng(seed)
  right_u, which = rng.random(len(tasks)), rng.integers(0, 1 << 30, len(tasks))

  def actions(i, task):
    meta = dict(task.metadata)
    if teacher_accuracy < 1.0 and right_u[i] >= teacher_accuracy:
      wrong = meta.get("teacher_mistakes")
      if not wrong:
        raise ValueError(
          f"sft.teacher_accuracy={teacher_accuracy}: task {task.id} has no teacher_mistakes "
          "in its metadata (procedural families that have them: echo_word)"
        )
      cmd = wrong[which[i] % len(wrong)]
    elif meta.get("demo_actions"):
      return list(meta["demo_actions"])
    else:
      cmd = task.solution_script.strip()
    return [agent_lib.format_tool_call("shell", command=cmd), agent_lib.format_tool_call("finish")]

  def one(i_task):
    i, task = i_task
    policy = agent_lib.ScriptedPolicy(tok, actions(i, task))
    return episodes(task, f"demo-{task.id}", 0, policy=policy)

  with concurrent.futures.ThreadPoolExecutor(workers) as ex:
    outs = list(ex.map(one, enumerate(tasks)))
  keep_failed = teacher_accuracy < 1.0
  return [
    {"tokens": s.tokens, "loss_mask": s.loss_mask, "passed": o.passed}
    for o in outs
    if not o.infra_error and (keep_failed or o.passed)
    for s in o.episode.segments
  ]


def warm_start(
  exp: Experiment,
  model_cfg,
  mesh,
  params,
  demos: list[dict],
  tel: Telemetry | None,
  pad_id: int,
  comm=multihost.Local(),
):
  """Supervised steps on demonstrations (see module docstring); returns the TrainState.

  In a multi-process job every process runs this with the same demos (`comm`: rl.multihost);
  only process 0 has `tel`. The state is on the host (params, and the AdamW moments that
  `sft.carry_moments` hands to RL).
  """
  from rl import packing
  from rl.train_state import create_train_state
  from rl.train_step import make_compute_logprobs, make_train_step

  s = exp.sft
  if not demos:
    raise RuntimeError("warm start: no demonstration passed the verifier (check the task family)")
  cfg = TrainConfig(
    loss=LossConfig(
      kl="none",
      policy_loss="ppo",
      aggregation="token-mean",
      compute_entropy=False,
      entropy_coef=s.entropy_coef,
    ),
    optim=OptimConfig(
      lr=s.lr,
      warmup_steps=s.warmup_steps,
      decay_steps=max(s.steps, 1),
      end_lr_ratio=s.end_lr_ratio,
      max_grad_norm=1.0,
    ),
    mesh=exp.train.mesh,
    rules=exp.train.rules,
  )
  state, shardings = create_train_state(model_cfg, cfg, mesh, jax.random.key(s.seed), params=params)
  rng = np.random.default_rng(s.seed)
  mult = _row_multiple(mesh, 1)
  step_fn = logp_fn = None
  for i in range(s.steps):
    idx = rng.choice(len(demos), s.batch_size, replace=len(demos) < s.batch_size)
    seqs = [{**demos[j], "advantage": 1.0} for j in idx]
    batch, _ = packing.pack(seqs, exp.loop.row_len, exp.loop.max_segments, mult, pad_id)
    rows = batch["tokens_BT"].shape[0]
    target = _bucket_rows(rows, mult)
    batch = {
      k: np.concatenate([v, np.zeros((target - rows, *v.shape[1:]), v.dtype)])
      for k, v in batch.items()
    }
    on_mesh = comm.batch(batch, mesh, cfg.rules)
    if step_fn is None:
      step_fn = make_train_step(model_cfg, cfg, mesh, shardings, on_mesh)
      logp_fn = make_compute_logprobs(model_cfg, cfg, mesh, shardings.params, on_mesh)
    if i % s.log_every == 0 or i == s.steps - 1:
      logp = np.asarray(comm.to_host(comm.call(logp_fn, state.params, on_mesh)))
      mask = batch["loss_mask_BT"] * (batch["positions_BT"] > 0)
      nll = float(-(logp * mask).sum() / max(mask.sum(), 1))
      if tel is not None:
        tel.log(i, {"sft/nll": nll}, progress=False)
        tel.write(f"[sft] step {i}/{s.steps}: nll/token {nll:.4f}")
    state, _ = comm.call(step_fn, state, on_mesh)
  return comm.to_host(state)


def carry_moments(opt_state, sft_opt_state, shardings):
  """`opt_state` with the AdamW second moments and count of `sft_opt_state`, as `shardings`.

  The first moments stay zero (fresh), and the learning-rate schedule's own count starts at
  0, so RL's warmup and decay run as configured.
  """
  import optax

  def pick(rl, sft):
    if isinstance(rl, optax.ScaleByAdamState):
      return rl._replace(nu=sft.nu, count=sft.count)
    return rl

  is_adam = lambda x: isinstance(x, optax.ScaleByAdamState)  # noqa: E731
  return jax.device_put(jax.tree.map(pick, opt_state, sft_opt_state, is_leaf=is_adam), shardings)


def _rl_state(exp: Experiment, model_cfg, mesh, params, sft):
  """RL's TrainState and shardings: from the warm start's params (`sft`, its host TrainState,
  or None: `params`), with its AdamW moments when `sft.carry_moments`."""
  from rl.train_state import create_train_state

  if sft is not None:
    params = sft.params
  key = jax.random.key(exp.loop.seed)
  state, shardings = create_train_state(model_cfg, exp.train, mesh, key, params=params)
  if sft is not None and exp.sft.carry_moments:
    opt = carry_moments(state.opt_state, sft.opt_state, shardings.opt_state)
    state = state.replace(opt_state=opt)
  return state, shardings


def _initial_params(exp: Experiment, tok):
  if exp.checkpoint:
    from models import hf

    return hf.load(exp.checkpoint)
  from models import transformer

  if tok is not None and exp.model.vocab_size < tok.vocab_size:
    raise ValueError(f"model.vocab_size {exp.model.vocab_size} < tokenizer's {tok.vocab_size}")
  return exp.model, jax.device_get(transformer.init(exp.model, jax.random.key(exp.loop.seed)))


def run(exp: Experiment, workdir: str, *, task_source=None) -> dict:
  """Runs (or resumes) the experiment in `workdir`; returns a summary (also summary.json).

  `task_source(workdir, on_event) -> (source, eval_tasks)` replaces `env.tasks` (bring your own
  task source: `task_for(group_id)`, `get(task_id)`, `demo_tasks(n)`, `observe_batch(groups)`,
  `state_dict()`, `load_state_dict(d)`, as ProceduralTasks and PoolTasks implement).
  """
  exp.validate()
  comm = multihost.channel()  # multi-process: only process 0 does host work (rl/multihost.py)
  if comm.multi and exp.devices not in (0, jax.device_count()):
    raise ValueError(f"devices={exp.devices}: a multi-process run trains on all devices (0)")
  try:
    return _run(exp, workdir, task_source, comm)
  except BaseException:
    comm.abort()  # process 0 failed: the others raise instead of waiting for it
    raise


def _run(exp: Experiment, workdir: str, task_source, comm) -> dict:
  from models.engine import Engine
  from models.generator import Generator

  wd = pathlib.Path(workdir)
  wd.mkdir(parents=True, exist_ok=True)
  ckpt = Checkpointer(
    wd / "checkpoints", every_steps=exp.loop.checkpoint_every, keep=exp.loop.keep_checkpoints
  )
  ckpt.install_signal_handlers()
  resuming = ckpt.latest_step() is not None
  if not comm.leader:
    return _follow(exp, ckpt, comm, resuming)
  (wd / "experiment.json").write_text(json.dumps(dataclasses.asdict(exp), indent=1, default=str))
  tel = Telemetry(wd, total_steps=exp.loop.steps, initial_step=ckpt.latest_step() or 0)
  if task_source is None:
    tasks, eval_tasks = make_task_source(exp.env, exp.loop.seed, wd, tel.event)
  else:
    tasks, eval_tasks = task_source(wd, tel.event)
  corpus = functools.partial(tokenizer_corpus, tasks, 2000, exp.env.system_prompt)
  tok = load_tokenizer(exp.tokenizer, wd, corpus)
  model_cfg, params = _initial_params(exp, tok)
  mesh = _mesh(exp)
  fmt = agent_lib.ChatFormat(tok, exp.env.system_prompt)
  engine = Engine(
    model_cfg,
    params,
    max_concurrent_decodes=exp.engine.slots,
    max_seq_len=exp.engine.max_seq_len,
    page_size=exp.engine.page_size,
  )
  gen = Generator(engine, tokenizer=tok)
  mk_eps = functools.partial(
    SandboxEpisodes,
    gen,
    fmt,
    backend=exp.env.backend,
    image=exp.env.image,
    verifier_mode=exp.env.verifier_mode,
  )
  episodes = mk_eps(exp.agent)
  if exp.cluster == "ray":  # rollout workers as Ray actors; same interface as gen/episodes
    from rl import ray_rollout

    gen.close()
    if exp.tokenizer.startswith("bpe:"):  # actors read the trained tokenizer's folder
      exp = dataclasses.replace(exp, tokenizer=str(wd / "tokenizer"))
    gen = ray_rollout.from_experiment(exp, model_cfg, params, on_event=tel.event, tokenizer=tok)
    episodes, mk_eps = gen, gen.with_agent
  try:
    sft = None  # the warm start's TrainState, if it runs
    if exp.sft.steps and not resuming:
      t0 = time.monotonic()
      demo_tasks = tasks.demo_tasks(exp.sft.demos)
      demos = demonstrations(
        demo_tasks,
        episodes,
        tok,
        exp.rollout.max_concurrency,
        exp.sft.teacher_accuracy,
        exp.sft.seed,
      )
      passed = sum(d["passed"] for d in demos)
      tel.event(
        "demonstrations",
        n=len(demos),
        of=len(demo_tasks),
        passed=passed,
        time_s=time.monotonic() - t0,
      )
      tel.write(
        f"[sft] {len(demos)} demonstrations of {len(demo_tasks)} tasks, {passed} pass the verifier"
      )
      demos, pad_id = _shared_demos(comm, demos, tok.pad_id)
      sft = warm_start(exp, model_cfg, mesh, params, demos, tel, pad_id, comm)
    state, shardings = _rl_state(exp, model_cfg, mesh, params, sft)
    eval_agent = dataclasses.replace(exp.agent, greedy=exp.env.eval_greedy)
    eval_fn = functools.partial(
      evaluate, mk_eps(eval_agent), eval_tasks, workers=exp.rollout.max_concurrency
    )
    buffer = StalenessBuffer(exp.loop.batch_groups, exp.loop.staleness)
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
      train_cfg=exp.train,
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
    )
    history = trainer.run()
    extra = comm.finish(trainer.state)  # multi-process: stops the others, compares replicas
  finally:
    gen.close()
    ckpt.close()
  plots = tel.close()
  summary = {**_summary(history, trainer.step, trainer.ckpt.preempted, plots), **extra}
  (wd / "summary.json").write_text(json.dumps(summary, indent=1))
  return summary


def _shared_demos(comm, demos: list[dict] | None, pad_id: int | None) -> tuple[list[dict], int]:
  """Process 0's demonstrations and pad id, the same on every process (one process: as is)."""
  if not comm.multi:
    return demos, pad_id
  seqs = demos
  if comm.leader:
    seqs = [
      {
        "tokens": np.asarray(d["tokens"], np.int32),
        "loss_mask": np.asarray(d["loss_mask"], np.float32),
      }
      for d in demos
    ]
  pad = comm.share({"pad_id": np.int32(pad_id)} if comm.leader else None)["pad_id"]
  return multihost.share_sequences(comm, seqs, ("tokens", "loss_mask")), int(pad)


def _follow(exp: Experiment, ckpt: Checkpointer, comm, resuming: bool) -> dict:
  """A process other than 0 of a multi-process run: process 0's device work, no host work."""
  from rl.train_step import make_train_step

  try:
    comm.watch(lambda: ckpt.preempted)
    model_cfg, params = _initial_params(exp, None)
    mesh = _mesh(exp)
    sft = None
    if exp.sft.steps and not resuming:
      demos, pad_id = _shared_demos(comm, None, None)
      sft = warm_start(exp, model_cfg, mesh, params, demos, None, pad_id, comm)
    state, shardings = _rl_state(exp, model_cfg, mesh, params, sft)
    make_step = functools.partial(make_train_step, model_cfg, exp.train, mesh, shardings)
    state, extra = multihost.follow(comm, state, make_step, ckpt, mesh, exp.train.rules)
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
