r"""Compare launch.eval runs: one table and one plot of pass@k per run and per group.

  python -m launch.compare_evals --runs="warm start=/tmp/ev-ws,RL=/tmp/ev-rl" \
      --group=family --out=/tmp/compare.png
  python -m launch.compare_evals --runs="warm=W,grpo=G0+G1,rft=R0+R1" \
      --sets="N=read_note+find_ext+find_word,U=copy_pointer+rename_ext" --out=/tmp/cmp.png

Reads each run's results.json (its `trials`), computes unbiased pass@k (envs.metrics, mean over
tasks) for k = 1, 2, 4, ... and the fewest trials per task (envs.metrics.default_ks), prints a markdown table (overall,
then per group: `family` for procedural task ids, or `suite` / `domain` / `difficulty`), and
draws pass@k against k, one line per run. A label given several folders joined by `+` (one per
seed) shows the mean of their curves. `--sets` adds named sets of groups (the training families
and the unseen ones, say): a column each, pass@k averaged over the set's tasks, and one plot panel
per set.
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
  flags.DEFINE_string(
    "sets", "", "Comma-separated name=group+group sets (e.g. N=read_note+find_ext,U=rename_ext)."
  )
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


def parse_sets(spec: str) -> dict[str, list[str]]:
  """ "N=a+b,U=c" -> {"N": ["a", "b"], "U": ["c"]}."""
  out = {}
  for part in filter(None, (p.strip() for p in spec.split(","))):
    name, eq, groups = part.partition("=")
    if not eq or not name.strip() or not groups.strip():
      raise ValueError(f"--sets: expected name=group+group, got {part!r}")
    out[name.strip()] = [g.strip() for g in groups.split("+") if g.strip()]
  return out


def _mean(curves: list[dict[int, float]]) -> dict[int, float]:
  curves = [c for c in curves if c]
  return {k: sum(c[k] for c in curves) / len(curves) for k in curves[0]} if curves else {}


def compare(
  runs: dict[str, list[dict] | list[list[dict]]],
  group: str,
  sets: dict[str, list[str]] | None = None,
) -> tuple[list[int], dict, list[str]]:
  """(ks, {label: {"all": curve, <set>: curve, <group>: curve}}, markdown table lines). A run
  given as a list of trial lists (seeds) gets the mean of their curves."""
  from envs.metrics import default_ks

  seeds = {k: (v if v and isinstance(v[0], list) else [v]) for k, v in runs.items()}
  sets = sets or {}
  per_task = [collections.Counter(t["task_id"] for t in ts) for v in seeds.values() for ts in v]
  fewest = min(min(c.values()) for c in per_task if c)
  ks = default_ks(fewest)  # as launch.eval reports them
  names = sorted({group_of(t, group) for v in seeds.values() for ts in v for t in ts})
  for s, members in sets.items():
    if missing := [m for m in members if m not in names]:
      raise ValueError(f"--sets: {s} names {missing}, not among this run's {group}s {names}")
  columns = {**{s: set(m) for s, m in sets.items()}, **{n: {n} for n in names}}
  curves = {}
  for label, trial_lists in seeds.items():
    curves[label] = {"all": _mean([pass_curve(ts, ks) for ts in trial_lists])}
    for col, members in columns.items():
      curves[label][col] = _mean(
        [pass_curve([t for t in ts if group_of(t, group) in members], ks) for ts in trial_lists]
      )
  fmt = lambda c: " / ".join(f"{c[k]:.3f}" for k in (ks[0], ks[-1])) if c else "-"  # noqa: E731
  head = [f"pass@{k}" for k in ks] + [f"{n} (pass@{ks[0]} / pass@{ks[-1]})" for n in columns]
  lines = ["| run | " + " | ".join(head) + " |", "|---" * (len(head) + 1) + "|"]
  for label, c in curves.items():
    cells = [f"{c['all'][k]:.3f}" for k in ks] + [fmt(c[n]) for n in columns]
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
  return ks, curves, lines


def plot(ks: list[int], curves: dict, out: str, panels: tuple[str, ...] = ("all",)) -> None:
  """pass@k against k, one line per run, one panel per entry of `panels` ("all" or a set)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 4), squeeze=False)
  for ax, panel in zip(axes[0], panels, strict=True):
    for label, c in curves.items():
      if c.get(panel):
        ax.plot(ks, [c[panel][k] for k in ks], marker="o", label=label)
    title = "held-out pass@k" if panel == "all" else f"{panel}: pass@k"
    ax.set(xscale="log", xlabel="k (trials per task)", ylabel=title, ylim=(-0.02, 1.02))
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
  runs = {
    k.strip(): [load(d.strip()) for d in v.split("+")] for k, v in (p.split("=", 1) for p in pairs)
  }
  sets = parse_sets(FLAGS.sets)
  ks, curves, lines = compare(runs, FLAGS.group, sets)
  print("\n".join(lines))
  if FLAGS.out:
    plot(ks, curves, FLAGS.out, tuple(sets) or ("all",))
    print(f"plot: {FLAGS.out}")
  return 0


if __name__ == "__main__":
  from launch import cli

  define_flags()
  cli.run(lambda argv: sys.exit(main(argv)))
