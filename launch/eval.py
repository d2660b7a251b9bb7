r"""Evaluate an agent on task suites and write results.json, summary.md and report.html.

  python -m launch.eval --tasks=long_horizon --agent=oracle --trials=1 --out=/tmp/ev
  python -m launch.eval --tasks=long_horizon,core --sample=5 --agent=null --out=/tmp/ev
  python -m launch.eval --tasks=path/to/tasks --agent=policy --checkpoint=CKPT \
      --trials=4 --concurrency=4 --backend=docker --seed=0 --out=/tmp/ev
  python -m launch.eval --tasks=core --agent=scripted --script=cmds.txt --out=/tmp/ev

Exit status: 0; 3 when trials stayed masked (infrastructure errors) after --retries; 4 when
some tasks did not load (the last line says how many); 2 for a usage error.

--tasks: comma-separated task folders (ours, Terminal-Bench or Harbor) and/or built-in suite
names (`builtin` for all). Failed episodes are exported under OUT/flywheel/; with
--train_tasks, OUT/decontamination.json (+ .md) compares that training pool to the eval tasks.
The policy decodes greedily by default, so the same seed, checkpoint and tasks give the same
scores. A training workdir (or its export) carries the run's agent and engine settings (system
prompt, protocol, turn / token / context budgets, sampling, engine tier, held-out seeds): the
policy runs with those unless a flag on the command line overrides one, and stderr says which
it used. The `Policy:` flags' defaults below apply to a plain HF folder.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

from absl import app, flags, logging

_TASKS = flags.DEFINE_string(
  "tasks", None, "Task folders and/or built-in suite names, comma-separated."
)
_AGENT = flags.DEFINE_enum("agent", "oracle", ["policy", "oracle", "null", "scripted"], "Agent.")
_CHECKPOINT = flags.DEFINE_string("checkpoint", None, "HF folder, .gguf or a named one (policy).")
_TOKENIZER = flags.DEFINE_string("tokenizer", "auto", "auto (checkpoint's), byte, or a folder.")
_SCRIPT = flags.DEFINE_string("script", None, "Command file, or folder of <task_id>.<ext> files.")
_TRIALS = flags.DEFINE_integer("trials", 1, "Trials per task.")
_CONCURRENCY = flags.DEFINE_integer("concurrency", 1, "Trials running at once.")
_BACKEND = flags.DEFINE_enum("backend", "bwrap", ["bwrap", "docker"], "Sandbox backend.")
_IMAGE = flags.DEFINE_string("image", "default", "Sandbox image.")
_PACKAGE_EGRESS = flags.DEFINE_bool(
  "package_egress",
  True,
  "Tasks that allow the network (TB1, Harbor allow_internet) reach this machine's configured "
  "package sources (pip, apt) through an allow-list proxy; --nopackage_egress: no network.",
)
_KEEP_SERVICES = flags.DEFINE_bool(
  "keep_services",
  None,
  "The agent's listening services stay up while the tests run (Terminal-Bench's and Harbor's "
  "harness; their tasks' default); --nokeep_services: kill every agent process first (the "
  "default of every other task). Unset: each task's choice. No effect with --verifier_mode=fresh.",
)
_OUT = flags.DEFINE_string("out", None, "Output folder.")
_SEED = flags.DEFINE_integer("seed", 0, "Run seed (per-trial seeds derive from it).")
_SAMPLE = flags.DEFINE_integer(
  "sample", 0, "If > 0: evaluate a seeded sample of this many tasks per suite."
)
_FILTER = flags.DEFINE_string("filter", None, "Only task ids matching this glob.")
_RETRIES = flags.DEFINE_integer("retries", 2, "Retries of a trial after an infrastructure error.")
_VERIFIER_MODE = flags.DEFINE_enum("verifier_mode", "after", ["after", "fresh"], "Grading mode.")
_MAX_TURNS = flags.DEFINE_integer("max_turns", 30, "Policy: turns per episode.")
_MAX_NEW = flags.DEFINE_integer("max_new_tokens", 256, "Policy: tokens per turn.")
_MAX_EP_TOKENS = flags.DEFINE_integer("max_episode_tokens", 8192, "Policy: tokens per episode.")
_MAX_CONTEXT = flags.DEFINE_integer("max_context_tokens", 8192, "Policy: context length.")
_GREEDY = flags.DEFINE_bool("greedy", True, "Policy: greedy decoding.")
_TEMPERATURE = flags.DEFINE_float("temperature", 1.0, "Policy: temperature when not greedy.")
_PROTOCOL = flags.DEFINE_enum(
  "protocol", "tool_call", ["tool_call", "markdown_bash"], "Policy: the agent protocol."
)
_SYSTEM_PROMPT = flags.DEFINE_string(
  "system_prompt",
  None,
  "Policy: system prompt (default: the protocol's; markdown_bash_v2: few-shot).",
)
_ENGINE_DTYPE = flags.DEFINE_enum(
  "engine_dtype", "", ["", "float32", "bfloat16"], "Policy: engine compute dtype ('': model's)."
)
_WEIGHT_DTYPE = flags.DEFINE_enum(
  "weight_dtype", "float32", ["float32", "int8"], "Policy: engine weights (int8: W8A8)."
)
_KV_DTYPE = flags.DEFINE_enum(
  "kv_dtype", "float32", ["float32", "bfloat16", "int8"], "Policy: engine KV cache dtype."
)
_MISMATCH = flags.DEFINE_integer(
  "mismatch_episodes",
  16,
  "Policy: score this many episodes' tokens with the trainer's fp32 forward and report the "
  "train-inference mismatch (0: skip).",
)
_EXPORT = flags.DEFINE_bool("export_failures", True, "Export failed episodes to OUT/flywheel.")
_PROCEDURAL = flags.DEFINE_string(
  "procedural", None, "Procedural families to add (comma-separated, or 'all'): held-out seeds."
)
_PROCEDURAL_TASKS = flags.DEFINE_integer("procedural_tasks", 4, "Tasks per procedural family.")
_TRAIN_TASKS = flags.DEFINE_string(
  "train_tasks", None, "Training pool for the decontamination report."
)


def _procedural(spec: str, n: int, eval_seed: int | None = None) -> list:
  """n held-out tasks of each family: the seeds a training run holds out (its env.eval_seed,
  or EnvConfig's)."""
  from envs import procedural
  from rl.config import EnvConfig

  seed = EnvConfig().eval_seed if eval_seed is None else eval_seed
  fams = list(procedural.FAMILIES) if spec == "all" else [f.strip() for f in spec.split(",")]
  try:
    return [procedural.generate(f, seed + i) for f in fams for i in range(n)]
  except KeyError as e:
    raise app.UsageError(f"--procedural: {e.args[0]}") from None


def _select(eval_seed: int | None = None):
  """Tasks and load errors; --filter matches folder names before anything loads."""
  import fnmatch

  from envs import eval as ev
  from envs.formats import loading

  try:
    tasks, errors = loading.resolve(_TASKS.value or "", _FILTER.value)
  except FileNotFoundError as e:
    raise app.UsageError(str(e)) from None
  if _FILTER.value:  # a task.toml may name an id other than its folder's
    tasks = [
      t
      for t in tasks
      if fnmatch.fnmatchcase(t.id, _FILTER.value)
      or fnmatch.fnmatchcase(t.id.split("/")[-1], _FILTER.value)
      or fnmatch.fnmatchcase(pathlib.Path(t.source).name, _FILTER.value)
    ]
  if _SAMPLE.value > 0:
    tasks = ev.sample_tasks(tasks, _SAMPLE.value, _SEED.value)
  if _PROCEDURAL.value:
    tasks += _procedural(_PROCEDURAL.value, _PROCEDURAL_TASKS.value, eval_seed)
  if not tasks and not errors:
    raise app.UsageError(f"--tasks={_TASKS.value!r} --filter={_FILTER.value!r}: no task")
  for e in errors:
    print(f"warning: load_error {e.task_id}: {e.reason}", file=sys.stderr)
  return tasks, errors


def _settings():
  """The policy's settings: a flag given wins, then the run's (a workdir or an export carries
  them, rl.runtime.run_settings), then the flag's default; says which on stderr."""
  from rl.runtime import export, run_settings

  path = export.resolve_checkpoint(_CHECKPOINT.value)
  stored = run_settings.read(path)
  given = {f: flags.FLAGS[f].value for f in run_settings.FLAGS if flags.FLAGS[f].present}
  defaults = {f: flags.FLAGS[f].value for f in run_settings.FLAGS}
  chosen, lines = run_settings.choose(stored, given, defaults)
  for line in lines:
    print(line, file=sys.stderr)
  return path, stored, chosen


def _agent(settings):
  from envs import eval as ev

  if _AGENT.value != "policy":
    return ev.make_agent(_AGENT.value, script=_SCRIPT.value), lambda: None
  from rl.config import EngineConfig
  from rl.runtime import replica, run_settings

  path, stored, chosen = settings
  cfg = run_settings.agent_config(stored, chosen)
  engine = EngineConfig(
    dtype=chosen["engine_dtype"], weight_dtype=chosen["weight_dtype"], kv_dtype=chosen["kv_dtype"]
  )
  return replica.policy_from_checkpoint(
    path, _TOKENIZER.value, cfg, _CONCURRENCY.value, chosen["system_prompt"],
    engine, record=_MISMATCH.value,
  )  # fmt: skip


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  if not (_TASKS.value or _PROCEDURAL.value) or not _OUT.value:
    raise app.UsageError("--tasks (or --procedural) and --out are required")
  from envs import eval as ev
  from envs import flywheel, report
  from envs.grading.verifier import VerifierConfig

  settings = None
  if _AGENT.value == "policy":
    if not _CHECKPOINT.value:
      raise app.UsageError("--agent=policy needs --checkpoint")
    settings = _settings()
  eval_seed = (settings and settings[1] or {}).get("eval_seed")
  tasks, load_errors = _select(eval_seed)
  cfg = ev.EvalConfig(
    trials=_TRIALS.value,
    concurrency=_CONCURRENCY.value,
    backend=_BACKEND.value,
    image=_IMAGE.value,
    seed=_SEED.value,
    retries=_RETRIES.value,
    package_egress=_PACKAGE_EGRESS.value,
    verifier=VerifierConfig(mode=_VERIFIER_MODE.value, keep_services=_KEEP_SERVICES.value),
  )
  agent, close = _agent(settings)
  out = pathlib.Path(_OUT.value)
  total, done = len(tasks) * cfg.trials, []
  from tqdm.auto import tqdm

  bar = tqdm(total=total, desc="trials", unit="trial", file=sys.stderr, dynamic_ncols=True,
             disable=not total)  # fmt: skip

  def progress(rec):
    done.append(rec)
    mark = "PASS" if rec["passed"] else rec["failure_mode"]
    bar.update(1)
    bar.set_postfix_str(f"passed {sum(bool(r['passed']) for r in done)}/{len(done)}")
    if not rec["passed"]:  # why, at once, on the console (summary.md and report.html keep it)
      why = report.failure_reason(rec)
      bar.write(f"{rec['task_id']} #{rec['trial']}: {mark}: {why}", file=sys.stderr)
    logging.info(
      "[%d/%d] %s #%d: %s (%.1fs)",
      len(done),
      total,
      rec["task_id"],
      rec["trial"],
      mark,
      rec["wall_s"],
    )

  t0 = time.monotonic()
  try:
    trials = ev.evaluate(tasks, agent, cfg, on_trial=progress) if tasks else []
  finally:
    bar.close()
    close()
  trials += [e.record() for e in load_errors]
  mismatch = _mismatch(agent, settings)
  config = {
    "tasks": _TASKS.value,
    "agent": _AGENT.value,
    "checkpoint": _CHECKPOINT.value,
    "script": _SCRIPT.value,
    "protocol": settings[2]["protocol"] if settings else None,
    "system_prompt": settings[2]["system_prompt"] if settings else None,
    "settings": settings[2] if settings else None,
    "procedural": _PROCEDURAL.value,
    "trials": cfg.trials,
    "concurrency": cfg.concurrency,
    "backend": cfg.backend,
    "seed": cfg.seed,
    "verifier_mode": cfg.verifier.mode,
    "n_tasks": len(tasks) + len(load_errors),
    "load_errors": len(load_errors),
    "wall_s": round(time.monotonic() - t0, 1),
  }
  if mismatch is not None:
    config["mismatch"] = mismatch
  summary = report.write_reports(out, trials, config)
  if mismatch is not None:
    add_section(out, "Train-inference mismatch", _mismatch_lines(mismatch))
  add_legend(out)
  if _EXPORT.value:
    flywheel.export_failures(trials, tasks, out / "flywheel")
  if _TRAIN_TASKS.value:
    rep = flywheel.decontamination_report(ev.resolve_tasks(_TRAIN_TASKS.value), tasks)
    flywheel.write_decontamination(rep, out / "decontamination.json")
  o = summary["overall"]
  print(
    json.dumps(
      {
        "pass@1": o["pass@1"],
        "pass@k": o["pass@k"],
        "completion": o["completion"],
        "step_success": o["step_success"],
        "forgetting": o["forgetting"],
        "pass@1_all": summary["pass@1_all"],
        "counts": summary["counts"],
        "failure_modes": summary["failure_modes"],
        "mismatch": mismatch,
        "out": str(out),
      },
      indent=1,
    )
  )
  if summary["counts"]["infra"]:
    return 3
  if load_errors:  # the last line says so: a scheduler's log tail, a shell's $?
    n = len(tasks) + len(load_errors)
    print(f"error: {len(load_errors)} of {n} tasks did not load (their load_error is in "
          f"{out / 'results.json'}); exit status 4", file=sys.stderr)  # fmt: skip
    return 4
  return 0


def _mismatch(agent, settings) -> dict | None:
  """The recorded episodes' mismatch against the trainer's fp32 forward (policy agent only)."""
  if getattr(agent, "model", None) is None:
    return None
  from rl.runtime import mismatch

  model_cfg, params = agent.model
  chosen = settings[2]
  tier = {"dtype": chosen["engine_dtype"] or model_cfg.dtype, "weights": chosen["weight_dtype"],
          "kv": chosen["kv_dtype"]}  # fmt: skip
  segs, sp = agent.segments, agent.agent_cfg.sampling()  # how the episodes were sampled
  return {"engine": tier, "segments": len(segs), **mismatch.score(model_cfg, params, segs, sp)}


def _mismatch_lines(m: dict) -> list[str]:
  e = m["engine"]
  if not m["tokens"]:
    return [f"No policy token was recorded (engine {e})."]
  return [
    f"Engine tier: compute {e['dtype']}, weights {e['weights']}, KV cache {e['kv']}; trainer: "
    f"the update step's fp32 forward over the same tokens ({m['tokens']} policy tokens of "
    f"{m['segments']} segments).",
    "",
    "| mean abs log-prob diff | max abs log-prob diff | KL(engine, trainer), k3 |",
    "|---|---|---|",
    f"| {m['mean']:.3g} | {m['max']:.3g} | {m['kl']:.3g} |",
  ]


def add_section(out: pathlib.Path, title: str, lines: list[str], html_body: str | None = None):
  """Appends a markdown section to summary.md and to report.html (`html_body`, or the same
  text preformatted)."""
  import html

  with open(out / "summary.md", "a") as f:
    f.write("\n".join(["", f"## {title}", "", *lines]) + "\n")
  body = html_body or f"<pre>{html.escape(chr(10).join(lines))}</pre>"
  page = (out / "report.html").read_text()
  page = page.replace("</body>", f"<h2>{html.escape(title)}</h2>{body}</body>")
  (out / "report.html").write_text(page)


# What every column of summary.md / report.html means (envs/metrics.py has the formulas).
LEGEND = (
  ("pass@1", "share of graded trials that passed the hidden tests, averaged over tasks"),
  ("pass@k", "unbiased chance that at least one of k trials passes (Chen et al. 2021)"),
  ("tasks / trials", "tasks evaluated / graded trials (masked trials are not graded)"),
  ("step success", "milestones reached / milestones declared, mean over trials"),
  ("completion", "passed and every milestone reached and no constraint violated"),
  ("forgetting", "share of trials (of tasks with constraints) that violated one"),
  ("1st violation (turn)", "mean turn of the first constraint violation"),
  ("turns / tokens / wall s", "mean agent turns, generated tokens, seconds per trial"),
  ("task errors", "tasks that did not load or set up (the task's fault), not graded"),
  ("infrastructure errors", "sandbox or engine failures after --retries, not graded"),
  ("failure modes", "trials per failure mode of the grade (tests_failed, timeout, ...)"),
  ("mismatch", "|engine log-prob - trainer fp32 log-prob| per sampled token; KL k3 estimate"),
)


def add_legend(out: pathlib.Path) -> None:
  """Appends the legend to summary.md and report.html."""
  import html

  rows = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in LEGEND)
  add_section(out, "Legend", [f"- **{k}**: {v}" for k, v in LEGEND], f"<table>{rows}</table>")


if __name__ == "__main__":
  from launch import cli

  cli.run(lambda argv: sys.exit(main(argv)))
