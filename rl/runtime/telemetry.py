"""Run telemetry: TensorBoard event files, JSONL metrics and events, a progress bar, PNG plots.

Under WORKDIR:
  metrics.jsonl     one JSON object per logged step: {"step": s, "time": unix, name: value, ...};
                    warm-start steps carry "sft_step" instead of "step"
  events.jsonl      discrete events (quarantine, sandbox errors, resume, preemption, ...)
  tb/               TensorBoard event files (`tensorboard --logdir WORKDIR`)
  plots/*.png       curves drawn at the end of a run (`plot_curves`)

Metric names use `/` groups (`pass_rate/overall`, `pass_rate/domain/files`, `time/idle_frac`);
each group gets one PNG. A step redone after a resume is logged again; readers keep the last
record of each step (`read_metrics`).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import sys
import time

import numpy as np

# Progress-bar names of the metrics the trainer shows (the rest keep their last path part).
LABELS = {
  "pass_rate/overall": "pass rate",
  "reward/mean": "reward",
  "time/idle_frac": "trainer idle",
  "staleness/max": "max staleness",
  "sft/nll": "nll/token",
}


def _clean(v):
  if isinstance(v, (np.generic,)):
    v = v.item()
  if isinstance(v, float) and not math.isfinite(v):
    return None
  return v


class Telemetry:
  """Writes scalars, histograms and events; shows a progress bar; plots at close."""

  def __init__(
    self,
    workdir: str | os.PathLike,
    *,
    total_steps: int | None = None,
    tensorboard: bool = True,
    progress: bool = True,
    print_every: int = 1,
    initial_step: int = 0,
  ):
    self.dir = pathlib.Path(workdir)
    self.dir.mkdir(parents=True, exist_ok=True)
    self._metrics = open(self.dir / "metrics.jsonl", "a", buffering=1)
    self._events = open(self.dir / "events.jsonl", "a", buffering=1)
    self._tb = None
    if tensorboard:
      from tensorboardX import SummaryWriter

      self._tb = SummaryWriter(str(self.dir / "tb"))
    self._bar = None
    if progress:
      from tqdm.auto import tqdm

      self._bar = tqdm(
        total=total_steps,
        initial=initial_step,
        desc="RL steps",
        unit="step",
        file=sys.stderr,
        dynamic_ncols=True,
        mininterval=1.0,
      )
    self.print_every = print_every
    self._last_step = initial_step
    self._rl = (total_steps, initial_step)
    self._in_phase = False

  def phase(self, name: str | None, total: int | None = None) -> None:
    """Relabels the one progress bar for a stage before RL ("demonstrations", "warm start"),
    counting that stage's `total` steps; `phase(None)` returns it to the RL steps."""
    self._in_phase = name is not None
    if self._bar is None:
      if name is not None:
        print(f"[{name}] ...", flush=True)
      return
    total, initial = (total, 0) if self._in_phase else self._rl
    self._bar.set_description(name or "RL steps", refresh=False)
    self._bar.set_postfix_str("", refresh=False)
    self._bar.reset(total=total)
    self._bar.update(initial)

  def log(
    self, step: int, metrics: dict, *, show: tuple[str, ...] = (), progress: bool = True
  ) -> None:
    """Records scalar metrics of `step`; `show` names the ones for the progress line.

    `progress=False`: a warm-start step (recorded as `sft_step`, the progress bar on its stage).
    """
    clean = {k: _clean(v) for k, v in metrics.items() if v is not None}
    # Warm-start steps count on their own (`sft_step`), so they never merge with RL steps.
    key = "step" if progress else "sft_step"
    self._metrics.write(json.dumps({key: step, "time": time.time(), **clean}) + "\n")
    if self._tb is not None:
      for k, v in clean.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
          self._tb.add_scalar(k, v, step)
    shown = {LABELS.get(k, k.split("/")[-1]): clean[k] for k in show if k in clean}
    if not progress:
      if self._in_phase and self._bar is not None:  # a warm-start step: that stage's bar
        self._bar.update(step + 1 - self._bar.n)
        self._bar.set_postfix(
          {LABELS.get(k, k): f"{v:.3g}" if isinstance(v, float) else v for k, v in clean.items()}
        )
      return
    if self._bar is not None:
      self._bar.update(max(0, step - self._last_step))
      self._bar.set_postfix(
        {k: f"{v:.3g}" if isinstance(v, float) else v for k, v in shown.items()}
      )
    elif show and step % self.print_every == 0:
      print(f"step {step}: " + " ".join(f"{k}={v:.4g}" for k, v in shown.items()), flush=True)
    self._last_step = step

  def histogram(self, step: int, name: str, values) -> None:
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
      return
    if self._tb is not None:
      self._tb.add_histogram(name, values, step)

  def episodes(self, step: int, groups, n: int = 3) -> str:
    """A table of `n` episodes of the batch (seeded by step): instruction, actions, reward.

    Printed to the console and written as TensorBoard text (`episodes`); returns the table."""
    rows = [r for g in sorted(groups, key=lambda g: g.group_id) for r in g.rows]
    if not rows:
      return ""
    rng = np.random.default_rng(step)
    pick = sorted(rng.choice(len(rows), size=min(n, len(rows)), replace=False))
    table = episode_table(step, [rows[i] for i in pick])
    if self._tb is not None:
      self._tb.add_text("episodes", table, step)
    self.write(table)
    return table

  def event(self, kind: str, **fields) -> None:
    rec = {"time": time.time(), "kind": kind, **{k: _clean(v) for k, v in fields.items()}}
    self._events.write(json.dumps(rec, default=str) + "\n")

  def write(self, text: str) -> None:
    """A console line that does not break the progress bar."""
    if self._bar is not None:
      self._bar.write(text)
    else:
      print(text, flush=True)

  def close(self, plot: bool = True) -> list[pathlib.Path]:
    if self._bar is not None:
      self._bar.close()
    if self._tb is not None:
      self._tb.close()
    self._metrics.close()
    self._events.close()
    return plot_curves(self.dir) if plot else []


def _cell(text: str, limit: int) -> str:
  text = " ".join(str(text).split()).replace("|", "\\|")
  return text if len(text) <= limit else text[: limit - 3] + "..."


def episode_table(step: int, rows: list[dict], width: int = 60) -> str:
  """Markdown table of trajectory rows (rl.runtime.records): task, instruction, actions, reward."""
  lines = [
    f"step {step}: sampled episodes",
    "| task | instruction | actions | turns | reward |",
    "|---|---|---|---|---|",
  ]
  for r in rows:
    acts = " ; ".join(r.get("commands") or ()) or f"(none: {r.get('finish_reason', '')})"
    lines.append(
      f"| {_cell(r['task_id'], 32)} | {_cell(r.get('instruction', ''), width)} "
      f"| {_cell(acts, width)} | {r.get('num_turns', 0)} | {float(r['reward']):.2f} |"
    )
  return "\n".join(lines)


def read_metrics(workdir: str | os.PathLike, key: str = "step") -> list[dict]:
  """metrics.jsonl as records sorted by step, the last record of each step winning: the RL
  steps, or with key="sft_step" the warm start's (their `step` is then the warm-start step)."""
  path = pathlib.Path(workdir) / "metrics.jsonl"
  by_step: dict[int, dict] = {}
  if not path.exists():
    return []
  for line in path.read_text().splitlines():
    try:
      rec = json.loads(line)
    except json.JSONDecodeError:  # a line cut by kill -9
      continue
    if key in rec:
      by_step[rec[key]] = {**by_step.get(rec[key], {}), **rec, "step": rec[key]}
  return [by_step[s] for s in sorted(by_step)]


def series(records: list[dict], key: str) -> tuple[np.ndarray, np.ndarray]:
  pts = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
  if not pts:
    return np.zeros(0), np.zeros(0)
  s, v = zip(*pts, strict=True)
  return np.asarray(s), np.asarray(v, dtype=np.float64)


def split_panels(values: dict[str, list[float]]) -> list[list[str]]:
  """Curve names per panel: rates and fractions (every value in [0, 1]) apart from the rest.

  On one axis with counts or seconds (eval/n, eval/time_s) a pass rate is a flat line at 0.
  """
  unit = [k for k, v in values.items() if len(v) and min(v) >= 0.0 and max(v) <= 1.0]
  return [p for p in (unit, [k for k in values if k not in unit]) if p]


def plot_curves(workdir: str | os.PathLike, groups: list[str] | None = None) -> list[pathlib.Path]:
  """One PNG per metric group (prefix before the first '/'), under WORKDIR/plots/."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  records = read_metrics(workdir) + read_metrics(workdir, "sft_step")
  keys = sorted(
    {
      k
      for r in records
      for k, v in r.items()
      if k not in ("step", "sft_step", "time") and isinstance(v, (int, float))
    }
  )
  by_group: dict[str, list[str]] = {}
  for k in keys:
    by_group.setdefault(k.split("/")[0], []).append(k)
  out_dir = pathlib.Path(workdir) / "plots"
  out_dir.mkdir(exist_ok=True)
  written = []
  for group, gkeys in sorted(by_group.items()):
    if groups is not None and group not in groups:
      continue
    curves = {k: series(records, k) for k in gkeys[:12]}
    panels = split_panels({k: v for k, (_, v) in curves.items()})
    fig, axes = plt.subplots(len(panels), 1, figsize=(6, 3.5 * len(panels)), squeeze=False)
    for ax, names in zip(axes[:, 0], panels, strict=True):
      for k in names:
        s, v = curves[k]
        ax.plot(s, v, label=k, marker="." if len(s) < 30 else None)
      ax.set_xlabel("step")
      ax.grid(alpha=0.3)
      ax.legend(fontsize=7, loc="best")
    axes[0, 0].set_title(group)
    fig.tight_layout()
    path = out_dir / f"{group}.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    written.append(path)
  if groups is None:
    written += plot_watch(records, out_dir)
  return written


# What a researcher watches during a run, one panel each (prefix "family/": every family).
WATCH = (
  ("pass rate", ("pass_rate/overall", "eval/pass_rate/overall")),
  ("per family (training batches)", ("family/",)),
  ("per family (held-out eval)", ("eval/family/",)),
  ("response tokens", ("episode/generated_tokens",)),
  ("turns", ("episode/turns",)),
  ("mismatch KL", ("train/mismatch_kl",)),
  ("entropy", ("train/entropy",)),
)


def plot_watch(records: list[dict], out_dir: pathlib.Path) -> list[pathlib.Path]:
  """plots/watch.png: the WATCH panels that have data."""
  import matplotlib.pyplot as plt

  keys = sorted({k for r in records for k in r})
  panels = []
  for title, names in WATCH:
    ks = [k for k in keys if any(k == n or (n.endswith("/") and k.startswith(n)) for n in names)]
    if ks:
      panels.append((title, ks))
  if not panels:
    return []
  fig, axes = plt.subplots(len(panels), 1, figsize=(6, 2.6 * len(panels)), squeeze=False)
  for ax, (title, ks) in zip(axes[:, 0], panels, strict=True):
    for k in ks:
      st, v = series(records, k)
      ax.plot(st, v, label=k, marker="." if len(st) < 30 else None)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="best")
  axes[-1, 0].set_xlabel("step")
  fig.tight_layout()
  path = out_dir / "watch.png"
  fig.savefig(path, dpi=90)
  plt.close(fig)
  return [path]
