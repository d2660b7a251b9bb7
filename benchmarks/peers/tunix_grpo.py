"""Tunix's GRPO learner on an RLCluster, one timed step at a time (see tunix_bench.py).

The same work as benchmarks/grpo_step.py: `prompts` prompts x G samples, prompt 64 + 128 new
tokens (sampled, no early stop), a k3-style KL to a reference (beta 0.04), PPO clip, AdamW
after a global-norm clip, fp32, one device. Wall time of each part comes from wrapping the
cluster's own methods (generate, reference log-probs, update, weight sync); a step is the
time from one step's rollout start to the next one's, so it includes the sync and the
learner's own bookkeeping. The first step (compilation) is reported apart.
"""

from __future__ import annotations

import statistics
import time

import jax
import numpy as np
import optax
from common import emit
from tunix.rl import rl_cluster as rlc
from tunix.rl.grpo import grpo_learner
from tunix.rl.rollout import base_rollout


def _timed(obj, name, log):
  fn = getattr(obj, name)

  def wrapper(*a, **kw):
    t = time.perf_counter()
    out = fn(*a, **kw)
    jax.block_until_ready(out)
    log.append((name, t, time.perf_counter()))
    return out

  setattr(obj, name, wrapper)


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
  log = []
  for name in ("generate", "get_ref_per_token_logps", "update_actor", "sync_weights"):
    _timed(cluster, name, log)
  # an array, not a list: the learner repeats each leaf G times (a list makes strings leaves)
  data = [
    {"prompts": np.array(prompts(shape, args.prompts, args.prompt, 100 + i))} for i in range(40)
  ]
  t0 = time.perf_counter()
  learner.train(data)
  t_end = time.perf_counter()
  starts = [t for name, t, _ in log if name == "generate"] + [t_end]
  steps = []
  for i in range(len(starts) - 1):
    parts = {}
    for name, a, b in log:
      if starts[i] <= a < starts[i + 1]:
        parts[name] = parts.get(name, 0.0) + (b - a)
    steps.append({"total_s": starts[i + 1] - starts[i], **parts})
  timed = steps[1:]
  med = {k: statistics.median(s.get(k, 0.0) for s in timed) for k in timed[0]}
  emit(
    peer="tunix",
    what="grpo_step",
    steps=steps,
    first_step_with_compile_s=starts[0] - t0 + steps[0]["total_s"],
    median_total_s=med["total_s"],
    median_rollout_s=med.get("generate", 0.0),
    median_reference_s=med.get("get_ref_per_token_logps", 0.0),
    median_update_s=med.get("update_actor", 0.0),
    median_sync_s=med.get("sync_weights", 0.0),
  )
