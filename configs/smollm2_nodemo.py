r"""RL where demonstrations do not exist: SmolLM2-135M-Instruct on a split of task families.

  python -m launch.train --config=configs/smollm2_nodemo.py --workdir=/tmp/nodemo-grpo
  python -m launch.train --config=configs/smollm2_nodemo.py --workdir=/tmp/nodemo-rft \
      --config.loop.algorithm=rft

The families (envs/procedural.py, envs/procedural_explore.py; rl.runtime.task_sources.SplitTasks):
  D (format): echo_word, count_level (one turn), peek_twice, move_only (look at what the
    instruction names, then act on what was seen: two turns). The warm start's demonstrations come from
    these only: they teach the markdown-bash reply, the sentinel and the look-then-act protocol.
  N (training, no demonstrations): read_note, find_ext, find_word. Multi-turn and
    observation-dependent (the answer is in a file the agent must read or find first). RL and
    RFT sample them; no arm ever trains on one of their reference solutions (the
    demonstrations builder refuses N and U tasks).
  U (unseen, eval only): copy_pointer (observation-dependent), rename_ext, and the note
    families (envs/procedural_notes.py: note.txt says what to do with which file; read_note's
    look-then-act with other acts), which show whether what RL learnt on read_note transfers.
Held out: `env.eval_tasks` tasks of each N and U family at the eval seeds (what `launch.eval
--procedural=<families> --procedural_tasks=<n>` evaluates), decontaminated against the pool.

The arms of the comparison (docs/results/nodemo.md, one `launch.sweep` command): the warm start
itself (`loop.steps=0`), then from its workdir (`checkpoint={sweep}/warm,sft.steps=0`, the one
warm start every arm shares): GRPO (this config: LoRA as configs/smollm2.py), RFT
(`loop.algorithm=rft`) and the SFT control (`loop.steps=0,sft.steps=K`: more supervised steps on
D's demonstrations). `loop.seed` changes
task sampling and episode seeds only: the pool, the demonstrations and the warm start are the
same for every arm and seed.
"""

from configs import smollm2

D = "echo_word,count_level,peek_twice,move_only"
N = "read_note,find_ext,find_word"
U = "copy_pointer,rename_ext,note_copy,note_delete,note_rename,note_mkdir"


def get_config():
  c = smollm2.get_config()
  e = c.env
  e.tasks = f"split:D={D};N={N};U={U}"
  e.eval_tasks = 4  # per N and U family: 12 held-out N tasks, 24 U tasks
  e.train_pool_size = 64  # tasks per N family in the pool (and per D family for demos)
  # The warm start: all 256 of D's pool tasks, 16 steps of 16. With four one-turn families
  # it answered in 1.1 turns; with two look families of fixed file names beside them, it looked
  # (1.8 turns) at the wrong thing; both passed 0 of 160 held-out N and U trials. With varied
  # names and 8 steps: N pass@8 0.083, and GRPO's groups were all-fail (docs/results/nodemo.md).
  c.sft.demos, c.sft.steps = 256, 16
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
