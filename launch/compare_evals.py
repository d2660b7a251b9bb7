r"""Compare launch.eval runs: one table and one plot of pass@k per run and per group.

  python -m launch.compare_evals --runs="warm start=/tmp/ev-ws,RL=/tmp/ev-rl" \
      --group=family --out=/tmp/compare.png

Reads each run's results.json (its `trials`), computes unbiased pass@k (envs.metrics, mean over
tasks) for k = 1, 2, 4, ... and the fewest trials per task (envs.metrics.default_ks), prints a markdown table (overall,
then per group: `family` for procedural task ids, or `suite` / `domain` / `difficulty`), and
draws pass@k against k, one line per run.
"""

from __future__ import annotations

import collections
import json
import pathlib
import sys

from absl import flags

FLAGS = flags.FLAGS
GROUPS = ("family", "suite", "domain", "difficulty")


def define_flags() -> None:
  flags.DEFINE_string("runs", None, "Comma-separated label=eval output folder pairs.")
  flags.DEFINE_enum("group", "family", GROUPS, "Per-group columns (family: procedural ids).")
  flags.DEFINE_string("out", None, "PNG to write (optional).")
  flags.mark_flags_as_required(["runs"])


def group_of(trial: dict, group: str) -> str:
  if group == "family":  # procedural/echo_word-1000003 -> echo_word; other ids: their suite
    from rl.runtime.task_sources import family

    return family(trial["task_id"])
  return str(trial[group])


def pass_curve(trials: list[dict], ks: list[int]) -> dict[int, float]:
  """Mean over tasks of unbiased pass@k, from graded (not masked) trials."""
  from envs.metrics import pass_at_k

  by_task = collections.defaultdict(list)
  for t in trials:
    if not t.get("masked"):
      by_task[t["task_id"]].append(bool(t["passed"]))
  if not by_task:
    return {}
  return {k: sum(pass_at_k(len(v), sum(v), k) for v in by_task.values()) / len(by_task) for k in ks}


def load(folder: str) -> list[dict]:
  path = pathlib.Path(folder) / "results.json"
  try:
    return json.loads(path.read_text())["trials"]
  except (OSError, ValueError, KeyError) as e:
    raise ValueError(f"{path}: not a launch.eval results.json ({type(e).__name__}: {e})") from e


def compare(runs: dict[str, list[dict]], group: str) -> tuple[list[int], dict, list[str]]:
  """(ks, {label: {"all": curve, <group>: curve}}, markdown table lines)."""
  from envs.metrics import default_ks

  per_task = [collections.Counter(t["task_id"] for t in trials) for trials in runs.values()]
  fewest = min(min(c.values()) for c in per_task if c)
  ks = default_ks(fewest)  # as launch.eval reports them
  names = sorted({group_of(t, group) for trials in runs.values() for t in trials})
  curves = {}
  for label, trials in runs.items():
    curves[label] = {"all": pass_curve(trials, ks)}
    for n in names:
      curves[label][n] = pass_curve([t for t in trials if group_of(t, group) == n], ks)
  fmt = lambda c: " / ".join(f"{c[k]:.3f}" for k in (ks[0], ks[-1])) if c else "-"  # noqa: E731
  head = [f"pass@{k}" for k in ks] + [f"{n} (pass@{ks[0]} / pass@{ks[-1]})" for n in names]
  lines = ["| run | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
  for label, c in curves.items():
    cells = [f"{c['all'][k]:.3f}" for k in ks] + [fmt(c[n]) for n in names]
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
  return ks, curves, lines


def plot(ks: list[int], curves: dict, out: str) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(6, 4))
  for label, c in curves.items():
    ax.plot(ks, [c["all"][k] for k in ks], marker="o", label=label)
  ax.set(xscale="log", xlabel="k (trials per task)", ylabel="held-out pass@k", ylim=(-0.02, 1.02))
  ax.set_xticks(ks, [str(k) for k in ks])
  ax.minorticks_off()
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(out, dpi=100)
  plt.close(fig)


def main(argv) -> int:
  from absl import app

  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  pairs = [p for p in FLAGS.runs.split(",") if p.strip()]
  if any("=" not in p for p in pairs):
    raise ValueError(f"--runs: expected label=folder pairs, got {FLAGS.runs!r}")
  runs = {k.strip(): load(v.strip()) for k, v in (p.split("=", 1) for p in pairs)}
  ks, curves, lines = compare(runs, FLAGS.group)
  print("\n".join(lines))
  if FLAGS.out:
    plot(ks, curves, FLAGS.out)
    print(f"plot: {FLAGS.out}")
  return 0


if __name__ == "__main__":
  from launch import cli

  define_flags()
  cli.run(lambda argv: sys.exit(main(argv)))
