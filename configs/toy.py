r"""Toy size of the demo, for CI and the quickstart notebook (about a minute on 2 CPU cores).

  python -m launch.train --config=configs/toy.py --workdir=/tmp/agentrl-toy
  python -m launch.train --config=configs/toy.py --workdir=/tmp/agentrl-toy-async \
      --config.loop.mode=async --config.loop.max_staleness=1

Same task family, real sandboxes and verifier as configs/demo.py, with a smaller policy, one
turn per episode (grading happens at the turn budget), four fixed training tasks (a
memorisable problem, so RL visibly improves within a dozen steps) and a short warm start.
Expected: the training pass rate of the last steps is clearly above that of the first ones
(tests/test_loop_toy.py asserts it).
"""

import ml_collections

from configs import demo


def get_config() -> ml_collections.ConfigDict:
  c = demo.get_config()
  m = c.model
  m.d_model, m.n_layers, m.n_heads, m.n_kv_heads, m.head_dim, m.d_ff = 96, 2, 4, 4, 24, 256
  m.max_seq_len = 256

  c.env.eval_tasks = 0  # the test reads the training pass rate; eval costs sandboxes
  c.env.train_pool_size = 4  # four fixed tasks: learnable by a tiny policy in a CI budget
  c.agent.max_turns = 1
  c.agent.max_new_tokens = 112
  c.agent.max_episode_tokens = 112
  c.agent.max_context_tokens = 224
  c.engine.max_seq_len = 256
  c.engine.slots = 16
  c.loop.row_len = 256

  c.sft.steps = 40
  c.sft.demos = 4
  c.sft.batch_size = 16
  c.sft.lr = 1e-2
  c.sft.warmup_steps = 10
  c.sft.log_every = 10

  c.rollout.group_size = 4
  c.rollout.max_concurrency = 8
  c.loop.batch_groups = 4
  c.loop.steps = 12
  c.loop.eval_every = 0
  c.loop.checkpoint_every = 4
  c.train.optim.decay_steps = 12
  c.train.optim.lr = 3e-4
  return c
