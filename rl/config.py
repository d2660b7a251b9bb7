"""Every config of an RL run, frozen and hashable (launch/ converts ml_collections into these).

`Experiment` is the whole run: model, update step (`TrainConfig`: loss, optimizer, mesh; defined
in rl.train_config, which the pure core reads without loading envs/), warm start, agent,
rollouts, loop, tasks, engine, cluster. `to_experiment(config)` parses a ConfigDict; unknown
fields and bad values are errors naming the field, at parse time. The host side's module (it
imports the agent's config from envs/); of rl/ it imports only rl.train_config.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import types
import typing

from envs.agents.agent import AgentConfig
from envs.agents.tool_format import DEFAULT_SYSTEM_PROMPT
from models.config import ModelConfig
from rl.train_config import LossConfig as LossConfig  # re-exported: rl.config names every config
from rl.train_config import OptimConfig as OptimConfig
from rl.train_config import TrainConfig


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
  group_size: int = 4
  max_infra_retries: int = 2
  dynamic_sampling: bool = True
  max_drop_factor: float = 4.0
  max_concurrency: int = 8
  min_concurrency: int = 1
  buffer_low: int = 1  # groups; below it concurrency grows
  buffer_high: int = 0  # above it concurrency shrinks; 0 = 2 * batch size
  lookahead: int = 1  # fresh tasks drawn ahead and ordered by their priority
  # Groups whose G sandboxes are created and set up ahead of admission (0: off). Set-up uses
  # no policy, so it need not spend the staleness budget (module docstring, "Prefetch").
  prefetch_groups: int = 0
  # This many groups masked for infrastructure failures in a row stop the run (a dead engine or
  # a broken sandbox backend fails every episode: retrying forever would hide it). 0: never.
  max_masked_in_a_row: int = 32
  seed: int = 0


@dataclasses.dataclass(frozen=True)
class LoopConfig:
  mode: str = "sync"  # sync | async
  # grpo: policy gradient on group advantages | rft: supervised steps on the batch's verified
  # successes, deduplicated (rejection-sampling fine-tuning, rl/rft.py)
  algorithm: str = "grpo"
  steps: int = 50
  batch_groups: int = 8  # B: groups (tasks) per update
  max_staleness: int = 1  # eta, async only (sync is 0): AReaL's admission bound
  # Hard cap on a trained trajectory's staleness (current version - its oldest token's), >= eta;
  # the trainer waits for a group rather than let it pass the cap. -1: 2 * max_staleness.
  max_token_staleness: int = -1
  row_len: int = 512  # T of packed training rows (>= the engine's max_seq_len)
  max_segments: int = 4  # sequences packed per row
  eval_every: int = 10  # 0: no periodic eval (an eval still runs at the start and end)
  checkpoint_every: int = 10
  keep_checkpoints: int = 3
  seed: int = 0
  # Optional replay: each batch also re-trains `replay_groups` recent groups with non-zero
  # advantage, at most `replay_max_staleness` versions old (decoupled PPO weights them).
  replay_groups: int = 0
  replay_capacity: int = 32
  replay_max_staleness: int = 2
  batch_timeout_s: float = 1800.0  # the trainer fails if no batch arrives in this long
  # Optimizer steps on each batch (PPO epochs; GRPO's mu): rollouts are the expensive part, and
  # the clipped ratio against the engine's behaviour log-probs bounds how far they move.
  updates_per_batch: int = 1

  def __post_init__(self):
    if self.mode not in ("sync", "async"):
      raise ValueError(f"LoopConfig.mode must be 'sync' or 'async', got {self.mode!r}")
    if self.algorithm not in ("grpo", "rft"):
      raise ValueError(f"LoopConfig.algorithm must be 'grpo' or 'rft', got {self.algorithm!r}")
    if self.algorithm == "rft" and self.replay_groups:
      raise ValueError("LoopConfig.replay_groups: replay is GRPO's; set 0 with algorithm 'rft'")
    if self.steps < 0 or self.batch_groups < 1:
      raise ValueError(
        f"LoopConfig.steps >= 0 and batch_groups >= 1, got {self.steps}, {self.batch_groups}"
      )
    if self.updates_per_batch < 1:
      raise ValueError(f"LoopConfig.updates_per_batch must be >= 1, got {self.updates_per_batch}")
    if 0 <= self.max_token_staleness < self.max_staleness:
      raise ValueError(
        f"LoopConfig.max_token_staleness {self.max_token_staleness} < max_staleness "
        f"{self.max_staleness} (or -1 for 2 * max_staleness)"
      )

  @property
  def staleness(self) -> int:
    return 0 if self.mode == "sync" else self.max_staleness

  @property
  def token_staleness(self) -> int:
    """The hard cap the buffer enforces (rl.runtime.buffer)."""
    if self.mode == "sync":
      return 0
    cap = self.max_token_staleness
    return 2 * self.max_staleness if cap < 0 else cap


@dataclasses.dataclass(frozen=True)
class RayConfig:
  address: str = (
    "local"  # "local": a private single-node cluster on 127.0.0.1; else ray.init(address)
  )
  num_workers: int = 2
  max_inflight_per_worker: int = 4  # back-pressure: episodes running on one worker at most
  worker_num_cpus: float = 1.0  # CPUs Ray reserves per worker actor
  max_episode_attempts: int = 3  # worker deaths one episode survives before it is an infra error
  max_worker_restarts: int = 8  # replacements of dead workers over the fleet's life
  num_cpus: int = 2  # local cluster only
  object_store_memory: int = 200 * 2**20  # local cluster only (bytes)

  def __post_init__(self):
    for f in ("num_workers", "max_inflight_per_worker", "max_episode_attempts"):
      if getattr(self, f) < 1:
        raise ValueError(f"RayConfig.{f} must be >= 1, got {getattr(self, f)}")


@dataclasses.dataclass(frozen=True)
class EnvConfig:
  tasks: str = "procedural:file_word"  # "procedural:<family>" or a folder of task folders
  backend: str = "bwrap"  # bwrap | docker
  image: str = "default"
  eval_tasks: int = 32  # held-out tasks evaluated at the start, every eval_every, and the end
  eval_seed: int = 1_000_003  # held-out seeds / split seed (never used for training tasks)
  eval_greedy: bool = True
  train_pool_size: int = 0  # procedural only: > 0 trains on that many fixed tasks (toy runs)
  system_prompt: str = DEFAULT_SYSTEM_PROMPT
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
  # The warm start's state is saved (WORKDIR/warm_start) after a step once this many seconds
  # passed since the last save, at Ctrl-C / SIGTERM and at its end: a killed warm start
  # resumes there (rl/runtime/warm_checkpoints.py). 0: after every step.
  checkpoint_every_s: float = 600.0
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
  # A weight swap under running requests (rl.runtime.weight_sync): "reprefill" lets running
  # requests finish on the old weights and re-prefills a session's context under the new ones
  # (every token's behaviour log-prob is its tagged version's); "keep": swap at once, keep K/V.
  kv_on_swap: str = "reprefill"
  # Share full pages of prompt (the system prompt and few-shot block every episode starts with)
  # across requests by content; the cache is keyed by weight version, a swap drops it.
  prefix_caching: bool = True
  # Precision tier of the engine (the trainer stays on the model config's): compute dtype
  # ("" = the model's, or "bfloat16"), weights ("float32" or "int8": W8A8) and KV cache
  # ("float32", "bfloat16" or "int8"). train/mismatch_* measures what a tier costs.
  dtype: str = ""
  weight_dtype: str = "float32"
  kv_dtype: str = "float32"
  # Decode attention: "paged_ffi" reads the KV pages in place (a C++ kernel built at set-up;
  # "gather" where it is missing, logged once), "gather" copies them first (the pure-JAX
  # reference). benchmarks/paged_decode.py measures the two; RESULTS.md has the figures.
  attention: str = "paged_ffi"

  def __post_init__(self):
    if self.kv_on_swap not in ("reprefill", "keep"):
      raise ValueError(
        f"EngineConfig.kv_on_swap must be 'reprefill' or 'keep', got {self.kv_on_swap!r}"
      )
    for f, ok in (("dtype", ("", "float32", "bfloat16")), ("weight_dtype", ("float32", "int8")),
                  ("kv_dtype", ("float32", "bfloat16", "int8")),
                  ("attention", ("paged_ffi", "gather"))):  # fmt: skip
      if getattr(self, f) not in ok:
        raise ValueError(f"EngineConfig.{f} must be one of {ok}, got {getattr(self, f)!r}")


@dataclasses.dataclass(frozen=True)
class Experiment:
  model: ModelConfig = ModelConfig()
  tokenizer: str = "byte"  # "byte" or a Hugging Face checkpoint folder
  # To start from ("": random init): an HF folder, a named checkpoint, or another run's workdir
  # (its latest checkpoint, LoRA merged: one warm start shared by a sweep's arms).
  checkpoint: str = ""
  devices: int = 0  # devices for the training mesh (0: all)
  train: TrainConfig = TrainConfig()
  sft: SFTConfig = SFTConfig()
  agent: AgentConfig = AgentConfig()
  rollout: RolloutConfig = RolloutConfig()
  loop: LoopConfig = LoopConfig()
  env: EnvConfig = EnvConfig()
  engine: EngineConfig = EngineConfig()
  cluster: str = "local"  # local | ray (rollout workers as Ray actors, rl/runtime/fleet.py)
  ray: RayConfig = RayConfig()

  def validate(self) -> None:
    if self.cluster not in ("local", "ray"):
      raise ValueError(f"cluster: must be 'local' or 'ray', got {self.cluster!r}")
    if self.sft.carry_moments and self.sft.steps and self.train.lora.enabled:
      raise ValueError(
        "sft.carry_moments: the warm start's AdamW moments are per base weight, LoRA "
        "(train.lora.rank > 0) trains adapters; set sft.carry_moments = False"
      )
    a = self.agent
    if not a.temperature > 0.0 or a.greedy or a.top_k or a.top_p != 1.0:
      raise ValueError(
        f"agent: training rollouts must sample at a temperature > 0 without top-k/top-p, got "
        f"temperature {a.temperature}, top_k {a.top_k}, top_p {a.top_p}, greedy {a.greedy} "
        "(the trainer scores logits / agent.temperature); use env.eval_greedy for eval"
      )
    if self.engine.max_seq_len > self.loop.row_len:
      raise ValueError(
        f"engine.max_seq_len {self.engine.max_seq_len} > loop.row_len {self.loop.row_len}"
      )
    if a.max_context_tokens > self.engine.max_seq_len:
      raise ValueError(
        f"agent.max_context_tokens {a.max_context_tokens} > engine.max_seq_len {self.engine.max_seq_len}"
      )


# ---------------------------------------------------------------- parsing


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


# Removed fields -> the field that owns their value now. A config or a stored experiment.json
# that still has one is read when the two agree (the old Experiment.validate made them equal).
RETIRED = {"train.loss.temperature": "agent.temperature"}


def drop_retired(data: dict, path: str = "config") -> dict:
  """A copy of `data` (an Experiment as nested dicts) without RETIRED fields; one that
  disagrees with its owner is an error naming both."""
  data = copy.deepcopy(data)
  for old, new in RETIRED.items():
    *parents, leaf = old.split(".")
    node = _lookup(data, parents, {})
    if not isinstance(node, dict) or leaf not in node:
      continue
    default = functools.reduce(getattr, new.split("."), Experiment())
    owner = _lookup(data, new.split("."), default)
    if node.pop(leaf) != owner:
      raise ValueError(f"{path}.{old}: retired; its value is {new}'s ({owner}): set {new}")
  return data


def _lookup(data: dict, keys: list[str], default):
  for k in keys:
    if not isinstance(data, dict) or k not in data:
      return default
    data = data[k]
  return data


def to_experiment(config, path: str = "config") -> Experiment:
  """An ml_collections config (configs/*.py) or a stored experiment.json's dict -> Experiment."""
  data = config.to_dict() if hasattr(config, "to_dict") else dict(config)
  return from_config(Experiment, drop_retired(data, path), path)
