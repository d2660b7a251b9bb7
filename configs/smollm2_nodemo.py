r"""RL where demonstrations do not exist: SmolLM2-135M-Instruct on a split of task families.

  python -m launch.train --config=configs/smollm2_nodemo.py --workdir=/tmp/nodemo-grpo
  python -m launch.train --config=configs/smollm2_nodemo.py --workdir=/tmp/nodemo-rft \
      --config.loop.algorithm=rft

The families (envs/procedural.py, envs/procedural_explore.py; rl.runtime.task_sources.SplitTasks):
  D (format): echo_word, sort_unique, count_level, json_select. The warm start's
    demonstrations come from these only: they teach the markdown-bash reply and the sentinel.
  N (training, no demonstrations): read_note, find_ext, find_word. Multi-turn and
    observation-dependent (the answer is in a file the agent must read or find first). RL and
    RFT sample them; no arm ever trains on one of their reference solutions (the
    demonstrations builder refuses N and U tasks).
  U (unseen, eval only): copy_pointer (observation-dependent), rename_ext.
Held out: `env.eval_tasks` tasks of each N and U family at the eval seeds (what `launch.eval
--procedural=<families> --procedural_tasks=<n>` evaluates), decontaminated against the pool.

The arms of the comparison (docs/results/nodemo.md, one `launch.sweep` command): GRPO (this
config: LoRA as configs/smollm2.py), RFT (`loop.algorithm=rft`), the SFT control (more warm-start
steps on D, `loop.steps=0`) and the warm start itself (`loop.steps=0`). `loop.seed` changes
task sampling and episode seeds only: the pool, the demonstrations and the warm start are the
same for every arm and seed.
"""

from configs import smollm2

D = "echo_word,sort_unique,count_level,json_select"
N = "read_note,find_ext,find_word"
U = "copy_pointer,rename_ext"


def get_config():
  c = smollm2.get_config()
  e = c.env
  e.tasks = f"split:D={D};N={N};U={U}"
  e.eval_tasks = 4  # per N and U family: 12 held-out N tasks, 8 U tasks
  e.train_pool_size = 64  # tasks per N family in the pool (and per D family for demos)
  c.sft.demos = 128  # of D's pool (4 x 64): every D task, once
  r = c.rollout
  r.group_size = 8  # 8 samples per task: a warm start near pass@8 ~0.3 still gets signal
  lp = c.loop
  lp.steps = 16
  lp.batch_groups = 2
  lp.eval_every = 0  # the arms are compared by launch.eval (8 trials); the loop's own eval
  #                   runs at the start and the end
  lp.checkpoint_every = 4
  c.train.optim.decay_steps = lp.steps
  return c
