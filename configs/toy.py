r"""Toy size of the demo, for CI and the quickstart notebook (a few minutes on 2 CPU cores).

  python -m launch.train --config=configs/toy.py --workdir=/tmp/agentrl-toy
  python -m launch.train --config=configs/toy.py --workdir=/tmp/agentrl-toy-async \
      --config.loop.mode=async --config.loop.max_staleness=1 --config.train.loss.decoupled=True

The demo's task family (echo_word: "Create a file named <name>.txt containing exactly the word
<word>.") in real bubblewrap sandboxes, graded by the real verifier, with a tiny byte-level
policy and one fixed training task, one turn per episode (graded at the turn budget). A short
warm start on its demonstration teaches the tool call but leaves the samples noisy (training
pass rate at step 0 about 0.05-0.2); GRPO then sharpens the policy (about 0.7 after 12 steps).
Every field the run relies on is set here (nothing is inherited from configs/demo.py).

Why these settings: GRPO on a sharp warm start barely moves it -- with Adam, the big gradients
of a failed sample's improbable tokens set the step size and the successes' share of it is
small; a larger learning rate then breaks the policy in one update. Weighting negative
advantages by 0.1 (train.loss.negative_advantage_weight) makes each update mostly reinforce the
successes; four tasks need conditioning on the instruction, which this tiny model does not
learn from RL within a CI budget, so the pool holds one. Dynamic sampling is off, so the batch
pass rate is the policy's own pass rate (tests/test_trainer_toy.py asserts that it rises).
"""

import dataclasses

import ml_collections

from rl.config import Experiment


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict(dataclasses.asdict(Experiment()))
  c.tokenizer = "byte"
  c.checkpoint = ""
  c.devices = 1
  c.cluster = "local"
  m = c.model
  m.arch, m.vocab_size, m.d_model, m.n_layers = "qwen3", 260, 96, 2
  m.n_heads, m.n_kv_heads, m.head_dim, m.d_ff = 4, 4, 24, 256
  m.max_seq_len, m.qk_norm, m.tie_embeddings, m.rope_theta = 256, True, True, 10000.0
  m.dtype, m.param_dtype, m.attention = "float32", "float32", "naive"

  e = c.env
  e.tasks, e.backend, e.image = "procedural:echo_word", "bwrap", "default"
  e.eval_tasks = 0  # the test reads the training pass rate; eval costs sandboxes
  e.train_pool_size = 1  # one fixed task (see the docstring)
  e.system_prompt = ""
  e.verifier_mode = "after"

  a = c.agent
  a.max_turns = 1
  a.max_new_tokens = 112
  a.max_episode_tokens = 112
  a.max_context_tokens = 224
  a.exec_timeout_s = 10.0
  a.episode_timeout_s = 60.0
  a.temperature, a.top_k, a.top_p, a.greedy = 1.0, 0, 1.0, False

  c.engine.slots = 16
  c.engine.max_seq_len = 256
  c.engine.page_size = 16

  s = c.sft
  s.steps, s.demos, s.batch_size = 36, 4, 16  # short: RL starts from a noisy policy
  s.lr, s.warmup_steps, s.seed, s.log_every = 1e-2, 10, 7, 10

  r = c.rollout
  r.group_size = 4
  r.max_concurrency, r.min_concurrency = 8, 4
  r.max_infra_retries = 2
  r.dynamic_sampling = False  # every group trained: the batch pass rate is the policy's
  r.max_drop_factor = 4.0

  lp = c.loop
  lp.mode, lp.max_staleness = "sync", 1
  lp.steps = 12
  lp.batch_groups = 4
  lp.row_len = 256
  lp.max_segments = 1
  lp.eval_every = 0
  lp.checkpoint_every = 4
  lp.keep_checkpoints = 3
  lp.seed = 0
  lp.replay_groups = 0

  t = c.train
  t.mesh.fsdp = 1
  t.micro_batches = 1
  t.loss.advantage = "grpo"
  t.loss.policy_loss = "ppo"
  t.loss.negative_advantage_weight = 0.1  # see the docstring
  t.loss.kl = "none"
  t.loss.aggregation = "token-mean"
  t.loss.decoupled = False
  t.loss.entropy_coef = 0.0
  t.optim.lr = 5e-4  # 7e-4 and up break the policy within a few updates
  t.optim.warmup_steps = 0
  t.optim.decay_steps = 12
  t.optim.end_lr_ratio = 1.0
  t.optim.weight_decay = 0.0
  t.optim.max_grad_norm = 1.0
  return c
