"""Tunix's GRPO learner on an RLCluster, one timed step at a time (see tunix_bench.py).

The same work as benchmarks/grpo_step.py: `prompts` prompts x G samples, prompt 64 + 128 new
tokens (sampled, no early stop), a k3-style KL to a reference (beta 0.04), PPO clip, AdamW
after a global-norm clip, fp32, one device. Wall time of each part comes from wrapping the
cluster's own methods (generate, reference log-probs, update, weight sync); a step is the
time from one step's rollout start to the next one's, so it includes the sync and the
learner's own bookkeeping. Interleaved with our steps (see common.serve): before each rollout
it prints the previous step's row and waits for a key on stdin; the first row (ready) comes
before the first step, whose row includes the compilation.
"""

from __future__ import annotations

import time

import common
import jax
import numpy as np
import optax
from tunix.rl import rl_cluster as rlc
from tunix.rl.grpo import grpo_learner
from tunix.rl.rollout import base_rollout


class _Steps:
  """Cuts the learner's run into steps at each rollout start (see the module docstring)."""

  def __init__(self):
    self.keys, self.log, self.start = common.stdin_keys(), [], None

  def wrap(self, obj, name):
    fn = getattr(obj, name)

    def wrapper(*a, **kw):
      if name == "generate":
        self.boundary()
      t = time.perf_counter()
      out = jax.block_until_ready(fn(*a, **kw))
      self.log.append((name, time.perf_counter() - t))
      return out

    setattr(obj, name, wrapper)

  def boundary(self, last: bool = False):
    """Prints the finished step's row (or the ready row), then waits for the next key."""
    if self.start is None:
      common.emit(ready=True, keys=["step"])
    else:
      parts = {}
      for name, s in self.log:
        parts[name] = parts.get(name, 0.0) + s
      common.emit(
        peer="tunix", what="grpo_step", total_s=time.perf_counter() - self.start,
        rollout_s=parts.get("generate", 0.0),
        reference_s=parts.get("get_ref_per_token_logps", 0.0),
        update_s=parts.get("update_actor", 0.0), sync_s=parts.get("sync_weights", 0.0),
      )  # fmt: skip
    if not last:
      if next(self.keys, None) is None:
        raise SystemExit(0)  # our side is done
      self.log, self.start = [], time.perf_counter()


def bench_grpo(args, shape, make_model, tokenizer_cls, prompts):
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]).reshape(1, 1), ("fsdp", "tp"))
  rollout = base_rollout.RolloutConfig(
    max_tokens_to_generate=args.new,
    max_prompt_length=args.prompt,
    kv_cache_size=args.prompt + args.new + 8,
    temperature=1.0,
    top_p=1.0,
    eos_tokens=[-1],
  )
  training = rlc.RLTrainingConfig(
    actor_optimizer=optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-5)),
    eval_every_n_steps=10_000,
    max_steps=args.steps + 1,
  )
  cluster = rlc.RLCluster(
    actor=make_model(shape, 0),
    reference=make_model(shape, 0),
    tokenizer=tokenizer_cls(),
    cluster_config=rlc.ClusterConfig(
      role_to_mesh={rlc.Role.ACTOR: mesh, rlc.Role.REFERENCE: mesh, rlc.Role.ROLLOUT: mesh},
      rollout_engine="vanilla",
      offload_to_cpu=False,
      training_config=training,
      rollout_config=rollout,
    ),
  )
  rng = np.random.default_rng(0)

  def reward(prompts, completions, **_):  # a binary reward (the verifier is not what is timed)
    return rng.random(len(completions)).round().tolist()

  algo = grpo_learner.GRPOConfig(num_generations=args.G, num_iterations=1, beta=args.beta)
  learner = grpo_learner.GRPOLearner(rl_cluster=cluster, algo_config=algo, reward_fns=reward)
  steps = _Steps()
  for name in ("generate", "get_ref_per_token_logps", "update_actor", "sync_weights"):
    steps.wrap(cluster, name)
  # an array, not a list: the learner repeats each leaf G times (a list makes strings leaves)
  data = [
    {"prompts": np.array(prompts(shape, args.prompts, args.prompt, 100 + i))} for i in range(40)
  ]
  learner.train(data)
  steps.boundary(last=True)
