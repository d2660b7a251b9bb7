r"""Export a training run's checkpoint as a Hugging Face folder.

  python -m launch.export --workdir=/tmp/agentrl-toy --out=/tmp/toy-hf [--step=latest|best|N]

Writes config.json, model.safetensors and the run's tokenizer (tokenizer.json and its config,
or, for the byte tokenizer, only chat_template.jinja: readers fall back to the byte tokenizer
when a folder has no tokenizer.json). A LoRA run exports its merged weights (W + scale * A @ B),
or with --adapters the adapters alone in PEFT's layout. `best` is the kept checkpoint with the highest held-out
eval pass rate. The folder loads with models.io.hf.load and `transformers`; launch.eval,
launch.generate_demo and launch.serve also take the workdir itself.
"""

from __future__ import annotations

import sys

from absl import flags

FLAGS = flags.FLAGS


def define_flags() -> None:
  flags.DEFINE_string("workdir", None, "Training run directory (launch.train's --workdir).")
  flags.DEFINE_string("step", "latest", "Checkpoint: latest, best (held-out eval) or a step.")
  flags.DEFINE_string("out", None, "Output folder (HF format).")
  flags.DEFINE_bool("adapters", False, "LoRA runs: write the adapters alone (PEFT layout).")
  flags.mark_flags_as_required(["workdir", "out"])


def main(argv) -> int:
  from absl import app

  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  from rl.runtime import export

  out = export.export(FLAGS.workdir, FLAGS.out, FLAGS.step, adapters=FLAGS.adapters)
  step = export.pick_step(FLAGS.workdir, FLAGS.step)
  print(f"exported step {step} of {FLAGS.workdir} to {out}")
  print(f"  python -m launch.eval --agent=policy --checkpoint={out} --tasks=... --out=...")
  return 0


if __name__ == "__main__":
  from launch import cli

  define_flags()
  cli.run(lambda argv: sys.exit(main(argv)))
