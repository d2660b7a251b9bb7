"""The agent and engine settings a run trained and evaluated with, carried by its exports.

A policy is only as good as the loop around it: the system prompt, protocol, turn / token /
context budgets and sampling it was trained under. `export` writes them into an export's
`agentrl_export.json` ("settings"), and `launch.eval` / `launch.serve` start from them, a flag
given on the command line overriding one (as a model folder's `generation_config.json` gives
`transformers` its defaults):

  stored = read(hf_folder)               # None: a folder no run wrote (plain HF checkpoint)
  chosen, lines = choose(stored, given)  # given: {flag: value} of the flags on the command line
"""

from __future__ import annotations

import dataclasses
import json
import pathlib

# launch flag -> its path in the settings (agent fields, the run's system prompt, its engine).
FLAGS = {
  "max_turns": ("agent", "max_turns"),
  "max_new_tokens": ("agent", "max_new_tokens"),
  "max_episode_tokens": ("agent", "max_episode_tokens"),
  "max_context_tokens": ("agent", "max_context_tokens"),
  "greedy": ("agent", "greedy"),
  "temperature": ("agent", "temperature"),
  "protocol": ("agent", "protocol"),
  "system_prompt": ("system_prompt",),
  "engine_dtype": ("engine", "dtype"),
  "weight_dtype": ("engine", "weight_dtype"),
  "kv_dtype": ("engine", "kv_dtype"),
}


def from_experiment(exp) -> dict:
  """The settings of `exp` (an rl.config.Experiment) as its held-out eval ran them: the agent's
  fields with `greedy` = env.eval_greedy, the run's system prompt, engine tier and sizes."""
  agent = dataclasses.asdict(exp.agent)
  agent["greedy"] = exp.env.eval_greedy
  e = exp.engine
  return {
    "agent": agent,
    "system_prompt": exp.env.system_prompt,
    "engine": {
      "dtype": e.dtype,
      "weight_dtype": e.weight_dtype,
      "kv_dtype": e.kv_dtype,
      "max_seq_len": e.max_seq_len,
      "page_size": e.page_size,
    },
    "tokenizer": exp.tokenizer,
    "eval_seed": exp.env.eval_seed,
  }


def read(folder) -> dict | None:
  """The settings an export folder carries (older exports: its run's experiment.json), with
  "source" naming where they came from; None for a folder no run wrote."""
  folder = pathlib.Path(folder)
  marker = folder / "agentrl_export.json"
  if not folder.is_dir() or not marker.is_file():
    return None
  try:
    meta = json.loads(marker.read_text())
  except (OSError, json.JSONDecodeError):
    return None
  if "settings" in meta:
    return {**meta["settings"], "source": str(marker)}
  run = pathlib.Path(meta.get("workdir", "")) / "experiment.json"
  if not run.is_file():
    return None
  from rl.config import Experiment, from_config

  exp = from_config(Experiment, json.loads(run.read_text()), str(run))
  return {**from_experiment(exp), "source": str(run)}


def _get(stored: dict, path: tuple):
  value = stored
  for key in path:
    if not isinstance(value, dict) or key not in value:
      return None
    value = value[key]
  return value


def choose(stored: dict | None, given: dict, defaults: dict) -> tuple[dict, list[str]]:
  """{flag: value}: a flag on the command line (`given`) wins, then the run's setting, then the
  flag's default; and the lines that say which came from where."""
  chosen, from_run = dict(defaults), []
  for flag, path in FLAGS.items():
    value = None if stored is None else _get(stored, path)
    if flag in given:
      chosen[flag] = given[flag]
    elif value is not None:
      chosen[flag] = value
      from_run.append(flag)
  lines = []
  if stored is not None:
    shown = ", ".join(f"{f}={_short(chosen[f])}" for f in from_run)
    lines.append(f"settings of the run ({stored['source']}): {shown or 'none used'}")
  if given:
    lines.append("from flags: " + ", ".join(f"--{f}={_short(v)}" for f, v in given.items()))
  elif stored is None:
    lines.append("settings: the flags' defaults (the checkpoint carries no run settings)")
  return chosen, lines


def _short(v) -> str:
  r = repr(v)
  return r if len(r) <= 40 else r[:36] + "...'"


def agent_config(stored: dict | None, chosen: dict):
  """The AgentConfig of the run's agent fields (budgets, timeouts, top-k/p) with `chosen`'s."""
  from envs.agents.agent import AgentConfig

  fields = {f.name for f in dataclasses.fields(AgentConfig)}
  base = {k: v for k, v in ((stored or {}).get("agent") or {}).items() if k in fields}
  base.update({path[1]: chosen[f] for f, path in FLAGS.items() if path[0] == "agent"})
  return AgentConfig(**base)
