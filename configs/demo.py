r"""The CPU demo: a tiny policy (BPE tokenizer trained at start) learns a terminal task with SFT + agentic GRPO.

  python -m launch.train --config=configs/demo.py --workdir=/tmp/agentrl-demo

Task family `echo_word` ("Create a file named <name>.txt containing exactly the word <word>."),
solved in real bubblewrap sandboxes and graded by the real verifier (hidden pytest). A short
supervised warm start (240 steps) on 512 verified demonstrations teaches the tool-call format
and part of the copying; GRPO then trains on fresh tasks of the family. The eval is pass@1 on
32 held-out tasks sampled at temperature 1 (the policy that GRPO trains).

Measured on a quiet 2-core CPU (2026-12-02, README 'Known gaps'): held-out pass rate 0.41 after
the warm start, 0.44 after 5 and after 10 GRPO steps -- the target (from <= 0.3 to >= 0.8 within
15 minutes) is NOT met: GRPO here improves the copying skill far more slowly than supervised
steps do. Larger learning rates (1e-3 and up) broke the policy.
Curves in WORKDIR/plots/*.png, metrics in WORKDIR/metrics.jsonl and TensorBoard (WORKDIR/tb).
"""

import dataclasses

import ml_collections

from rl.experiment import Experiment


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict(dataclasses.asdict(Experiment()))
  c.tokenizer = "bpe:512"  # trained on the family's texts at start (WORKDIR/tokenizer)
  c.devices = 1
  m = c.model
  m.arch, m.vocab_size, m.d_model, m.n_layers = "qwen3", 512, 128, 3
  m.n_heads, m.n_kv_heads, m.head_dim, m.d_ff = 8, 8, 16, 384
  m.max_seq_len, m.qk_norm, m.tie_embeddings, m.rope_theta = 192, True, True, 10000.0
  m.attention = "naive"

  c.env.tasks = "procedural:echo_word"
  c.env.backend = "bwrap"
  c.env.eval_tasks = 32
  c.env.eval_greedy = False  # pass@1 sampled at temperature 1, as the policy is trained
  c.env.system_prompt = ""

  c.agent.max_turns = 2
  c.agent.max_new_tokens = 48
  c.agent.max_episode_tokens = 96
  c.agent.max_context_tokens = 192
  c.agent.exec_timeout_s = 10.0
  c.agent.episode_timeout_s = 60.0

  c.engine.slots = 32
  c.engine.max_seq_len = 192

  c.sft.steps = 240  # held-out pass rate 0.41 here (greedy 0.38); 260 steps alone reach ~0.8
  c.sft.batch_size = 32
  c.sft.lr = 1e-2
  c.sft.warmup_steps = 20
  c.sft.demos = 512
  c.sft.log_every = 25

  c.rollout.group_size = 4
  c.rollout.max_concurrency = 8
  c.rollout.min_concurrency = 4

  c.loop.mode = "sync"
  c.loop.steps = 20
  c.loop.batch_groups = 8
  c.loop.row_len = 192
  c.loop.max_segments = 1
  c.loop.eval_every = 5
  c.loop.checkpoint_every = 10

  t = c.train
  t.mesh.fsdp = 1
  t.loss.advantage = "grpo"
  t.loss.kl = "none"
  t.loss.aggregation = "token-mean"
  t.optim.lr = 3e-4
  t.optim.warmup_steps = 0
  t.optim.decay_steps = 20
  t.optim.end_lr_ratio = 0.3
  t.optim.max_grad_norm = 1.0
  return c
