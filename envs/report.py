"""Evaluation reports: results.json, a Markdown summary and a self-contained HTML page.

`write_reports(out_dir, trials, config)` writes

  results.json   {"config", "summary" (envs.metrics.aggregate), "trials"} -- everything
  summary.md     the headline tables (overall, per suite / domain / difficulty, failure modes)
                 and one line per failed trial saying why (load, set-up or test-runner error,
                 the first failed test's message)
  report.html    the same tables plus plots (matplotlib, PNG embedded as base64): pass@k,
                 pass@1 per domain and difficulty, failure modes, milestone progress by turn,
                 turn of the first constraint violation

The HTML page has no external references, so it can be attached or archived as one file.
"""

from __future__ import annotations

import base64
import html
import io
import json
import pathlib
from collections.abc import Sequence

from envs import metrics

_COLUMNS = (
  ("tasks", "tasks", "{}"),
  ("trials", "trials", "{}"),
  ("pass@1", "pass@1", "{:.3f}"),
  ("step_success", "step success", "{:.3f}"),
  ("completion", "completion", "{:.3f}"),
  ("forgetting", "forgetting", "{:.3f}"),
  ("first_violation_mean", "1st violation (turn)", "{:.1f}"),
  ("mean_turns", "turns", "{:.1f}"),
  ("mean_tokens", "tokens", "{:.0f}"),
  ("mean_wall_s", "wall s", "{:.1f}"),
)


def _fmt(v, spec: str) -> str:
  return "-" if v is None else spec.format(v)


def _table(title: str, groups: dict, ks: Sequence[int]) -> list[list[str]]:
  extra_k = [str(k) for k in ks if k != 1]
  head = [title] + [c[1] for c in _COLUMNS] + [f"pass@{k}" for k in extra_k]
  rows = [head]
  for name, g in groups.items():
    row = [name] + [_fmt(g.get(key), spec) for key, _, spec in _COLUMNS]
    row += [_fmt(g["pass@k"].get(k), "{:.3f}") for k in extra_k]
    rows.append(row)
  return rows


def _md(rows: list[list[str]]) -> str:
  out = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
  out += ["| " + " | ".join(r) + " |" for r in rows[1:]]
  return "\n".join(out)


def _html_table(rows: list[list[str]]) -> str:
  head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
  body = "".join(
    "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows[1:]
  )
  return f"<table><tr>{head}</tr>{body}</table>"


def _sections(summary: dict, trials: Sequence[dict] = ()) -> list[tuple[str, list[list[str]]]]:
  ks = summary["ks"]
  secs = [
    ("Overall", _table("all", {"all": summary["overall"]}, ks)),
    ("By suite", _table("suite", summary["by_suite"], ks)),
    ("By domain", _table("domain", summary["by_domain"], ks)),
    ("By difficulty", _table("difficulty", summary["by_difficulty"], ks)),
  ]
  fm = [["failure mode", "trials"]] + [[k, str(v)] for k, v in summary["failure_modes"].items()]
  secs.append(("Failure modes", fm))
  tasks = [["task", "n", "passed", "pass@1", "step success", "forgetting", "turns"]]
  for s in summary["tasks"]:
    tasks.append(
      [
        s["task_id"],
        str(s["n"]),
        str(s["passed"]),
        _fmt(s["pass@k"].get("1"), "{:.2f}"),
        _fmt(s["step_success"], "{:.2f}"),
        _fmt(s["forgetting"], "{:.2f}"),
        _fmt(s["mean_turns"], "{:.1f}"),
      ]
    )
  secs.append(("Per task", tasks))
  why = _why_rows(trials)
  if len(why) > 1:
    secs.append(("Why tasks failed", why))
  return secs


WHY_CHARS = 300  # one line per failed trial in summary.md / report.html / the console
MAX_WHY_ROWS = 200


def failure_reason(rec: dict) -> str:
  """One line saying why a trial failed: its load, set-up or grading error; for failed tests,
  the first failed test and its message; else the last line the test runner printed."""
  why = rec.get("detail") or rec.get("failure_mode") or ""
  bad = [t for t in rec.get("tests") or [] if t.get("outcome") != "passed"]
  if bad:
    msg = (bad[0].get("message") or "").strip().splitlines()
    why += f"; {bad[0]['name']}" + (f": {msg[0]}" if msg else "")
  elif rec.get("grade_failure_mode") not in ("load_error", "task_error"):
    tail = [ln for ln in (rec.get("test_output") or "").splitlines() if ln.strip()]
    why += f"; runner said: {tail[-1].strip()}" if tail else ""
  why = " ".join(why.split())
  return why if len(why) <= WHY_CHARS else why[: WHY_CHARS - 3] + "..."


def _why_rows(trials: Sequence[dict]) -> list[list[str]]:
  rows = [["task", "trial", "failure mode", "why"]]
  for t in [t for t in trials if not t.get("passed")][:MAX_WHY_ROWS]:
    rows.append([t["task_id"], str(t.get("trial", 0)), t["failure_mode"], failure_reason(t)])
  return rows


def markdown_summary(summary: dict, config: dict | None = None, trials: Sequence[dict] = ()) -> str:
  o, n = summary["overall"], summary.get("counts", {})
  lines = [
    "# Evaluation summary",
    "",
    f"pass@1 **{_fmt(o['pass@1'], '{:.3f}')}** over {o['tasks']} tasks and {o['trials']} graded "
    f"trials; {n.get('task_error', 0)} task errors (did not load or set up: the task's fault) and "
    f"{n.get('infra', 0)} infrastructure errors are not graded. Counting every task error as a "
    f"failure: pass@1 {_fmt(summary.get('pass@1_all'), '{:.3f}')}.",
  ]
  if config:
    lines += ["", "`" + " ".join(f"{k}={v}" for k, v in config.items()) + "`"]
  for title, rows in _sections(summary, trials):
    lines += ["", f"## {title}", "", _md(rows)]
  return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- plots


def _png(fig) -> str:
  buf = io.BytesIO()
  fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
  import matplotlib.pyplot as plt

  plt.close(fig)
  return base64.b64encode(buf.getvalue()).decode()


def plots(summary: dict, trials: Sequence[dict]) -> dict[str, str]:
  """Title -> base64 PNG for every plot the data supports."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  out = {}
  pk = summary["overall"]["pass@k"]
  if pk:
    fig, ax = plt.subplots(figsize=(5, 3))
    for name, g in summary["by_suite"].items():
      ks = sorted(int(k) for k in g["pass@k"])
      ax.plot(ks, [g["pass@k"][str(k)] for k in ks], marker="o", label=name or "(none)")
    all_ks = summary["ks"]
    ax.set(xlabel="k", ylabel="pass@k", ylim=(-0.02, 1.02), title="pass@k by suite")
    if max(all_ks) > 2:
      ax.set_xscale("log", base=2)
    ax.set_xticks(all_ks, [str(k) for k in all_ks])
    ax.legend(fontsize=7)
    out["pass@k"] = _png(fig)
  for key in ("by_domain", "by_difficulty"):
    groups = summary[key]
    fig, ax = plt.subplots(figsize=(5, 3))
    names = list(groups)
    ax.bar(range(len(names)), [groups[n]["pass@1"] or 0.0 for n in names])
    ax.set_xticks(range(len(names)), names)
    ax.set(ylabel="pass@1", ylim=(0, 1.02), title=f"pass@1 {key.replace('_', ' ')}")
    ax.tick_params(axis="x", labelrotation=45, labelsize=7)
    out[f"pass@1 {key}"] = _png(fig)
  fm = summary["failure_modes"]
  fig, ax = plt.subplots(figsize=(5, 3))
  ax.barh(range(len(fm)), list(fm.values()))
  ax.set_yticks(range(len(fm)), list(fm))
  ax.set(xlabel="trials", title="failure modes")
  out["failure modes"] = _png(fig)
  curve = summary["milestone_curve"]
  if curve:
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot(range(len(curve)), curve, marker=".")
    ax.set(xlabel="turn", ylabel="milestones reached", ylim=(-0.02, 1.02), title="progress by turn")
    out["milestone progress"] = _png(fig)
  fv = [
    t["checks"]["first_violation_turn"]
    for t in trials
    if t.get("checks") and t["checks"].get("first_violation_turn") is not None
  ]
  if fv:
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.hist(fv, bins=range(0, max(fv) + 2))
    ax.set(xlabel="turn", ylabel="trials", title="turn of the first constraint violation")
    out["first violation"] = _png(fig)
  return out


def html_report(summary: dict, trials: Sequence[dict], config: dict | None = None) -> str:
  parts = [
    "<!doctype html><html><head><meta charset='utf-8'><title>agentrl evaluation</title>",
    "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
    "td,th{border:1px solid #ccc;padding:2px 8px;font-size:13px}img{margin:4px}</style>",
    "</head><body><h1>agentrl evaluation</h1>",
  ]
  if config:
    parts.append(f"<pre>{html.escape(json.dumps(config, indent=1))}</pre>")
  for title, png in plots(summary, trials).items():
    parts.append(f"<img alt='{html.escape(title)}' src='data:image/png;base64,{png}'>")
  for title, rows in _sections(summary, trials):
    parts.append(f"<h2>{html.escape(title)}</h2>{_html_table(rows)}")
  parts.append("</body></html>")
  return "\n".join(parts)


def write_reports(
  out_dir: str | pathlib.Path, trials: Sequence[dict], config: dict | None = None
) -> dict:
  """Writes results.json, summary.md and report.html; returns the summary."""
  out = pathlib.Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  summary = metrics.aggregate(trials)
  doc = {"config": config or {}, "summary": summary, "trials": list(trials)}
  (out / "results.json").write_text(json.dumps(doc, indent=1, sort_keys=False, default=str))
  (out / "summary.md").write_text(markdown_summary(summary, config, trials))
  (out / "report.html").write_text(html_report(summary, trials, config))
  return summary
