r"""The no-demonstration comparison (configs/smollm2_nodemo.py) with a warm start that has seen
the primitive acts: D adds five families that demonstrate `cp`, `rm`, a rename, stripping an
extension and `grep` (envs/procedural_acts.py) on tasks unlike N's and U's.

  python -m launch.train --config=configs/smollm2_nodemo_acts.py --workdir=/tmp/acts-grpo

Why: with configs/smollm2_nodemo.py's D (echo, count, peek, move) the warm start never solved
find_ext or find_word (0 of 128 samples at temperature 1): every group there was all-fail, so
neither GRPO nor RFT had a success to learn from, and U's acts (copy, delete, rename) were
commands it had never seen. N and U are unchanged, so the held-out sets and their
decontamination are the same; every N and U family still has no demonstration (the builder
refuses them). The sweep, arms and evaluation are docs/results/nodemo.md's, with this config.
"""

from configs import smollm2_nodemo

ACTS = "copy_one,delete_ext,rename_one,strip_ext,find_line"
D = f"{smollm2_nodemo.D},{ACTS}"
N, U = smollm2_nodemo.N, smollm2_nodemo.U


def get_config():
  c = smollm2_nodemo.get_config()
  c.env.tasks = f"split:D={D};N={N};U={U}"
  # One pass over D's demonstrations, as the first warm start: 64 per family, 9 families.
  c.sft.demos = 64 * len(D.split(","))
  c.sft.steps = c.sft.demos // c.sft.batch_size
  return c
