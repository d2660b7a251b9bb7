r"""The note-family comparison with rollouts sampled at temperature 1 (the README's arms).

  python -m launch.train --config=configs/smollm2_nodemo_notes_t1.py --workdir=/tmp/notes-t1 \
    --config.checkpoint=WARM_WORKDIR --config.sft.steps=0 [--config.loop.algorithm=rft]

Why: configs/smollm2_nodemo_notes.py samples at 0.7, where the warm start's policy is nearly
deterministic: most groups of 8 held one or two distinct command sequences, 88-90 % of them
all-pass or all-fail, and 6 of a GRPO run's 16 updates had no gradient. At temperature 1 GRPO
reaches N pass@1 0.958 and 0.969 on seeds 0 and 1 in about 20 minutes, RFT 0.969 and 0.823
(docs/results/nodemo.md). Everything
else is the notes config's: the same split, warm start and held-out tasks; the recorded arms
ran as that config with `agent.temperature=1.0`, which equals this one (asserted in
tests/test_procedural_acts.py). `launch.eval --checkpoint=WORKDIR` samples at the run's 1.0
unless `--temperature` says otherwise.
"""

from configs import smollm2_nodemo_notes


def get_config():
  c = smollm2_nodemo_notes.get_config()
  c.agent.temperature = 1.0
  return c
