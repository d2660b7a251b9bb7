r"""The no-demonstration split with a curriculum: N's pool adds easier levels of find_ext and
find_word (find_ext_small, find_word_small: the same exercises over 2-3 files).

  python -m launch.train --config=configs/smollm2_nodemo_curriculum.py --workdir=/tmp/nodemo-c \
      --config.checkpoint=WARM_WORKDIR --config.sft.steps=0

Why: from configs/smollm2_nodemo.py's warm start, GRPO sampled 0 successes in 88 episodes of
find_ext and find_word (their groups were all-fail and dropped: no gradient), so RL only
learnt read_note. The small levels are N tasks too (no demonstrations, the builder refuses
them); D, U, the held-out tasks and the warm start are those of smollm2_nodemo.py (its
demonstrations are the same tasks: the arms start from its warm workdir), and the comparison
evaluates the same held-out N and U families at full size.
"""

from configs import smollm2_nodemo

D, U = smollm2_nodemo.D, smollm2_nodemo.U
N = smollm2_nodemo.N + ",find_ext_small,find_word_small"


def get_config():
  c = smollm2_nodemo.get_config()
  c.env.tasks = f"split:D={D};N={N};U={U}"
  return c
