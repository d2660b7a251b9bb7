"""The SFT warm start: verified demonstrations, supervised steps, and RL's initial state.

Warm start (`sft.steps > 0`): demonstrations are the tasks' reference actions replayed by
`envs.agents.agent.ScriptedPolicy` through the real agent loop in real sandboxes and kept only if the
verifier passes them; SFT reuses the jitted GRPO step with advantage 1 and no behaviour
logprobs (on-policy, ratio 1), whose gradient is exactly the token-mean cross-entropy's.
`rl_state` then starts RL from the warm start's params (and, with `sft.carry_moments`, its
AdamW second moments).
"""

from __future__ import annotations

import concurrent.futures
import shlex

import jax
import numpy as np
import optax

from envs.agents import markdown_bash
from envs.agents.agent import ScriptedPolicy
from envs.agents.tool_format import format_tool_call, parse_tool_call
from envs.procedural import family
from rl.batch import row_multiple, sft_batch
from rl.config import Experiment, OptimConfig, TrainConfig
from rl.rft import supervised_loss
from rl.train_state import create_train_state
from rl.train_step import make_compute_logprobs, make_train_step


def demonstrations(
  tasks, episodes, tok, workers: int, teacher_accuracy: float = 1.0, seed: int = 0,
  protocol: str = "tool_call", budget=None, say=print, refuse: frozenset = frozenset(),
) -> list[dict]:  # fmt: skip
  """Teacher actions replayed through the agent loop in real sandboxes, with their grade.

  The teacher replays each task's reference command (or `demo_actions`); with
  `teacher_accuracy` < 1 a seeded share of tasks gets one of the task's `teacher_mistakes`
  instead and every demonstration is kept (`passed` says which the verifier passed);
  otherwise only passing ones are kept; one that fails (or hits an infrastructure error) is
  replayed once, and a task left without a demonstration is named through `say`.
  `protocol` (agent.protocol): `tool_call` replays tool-call texts; `markdown_bash` one
  ```bash block per action, the last one ending with the sentinel, each reply closed by the
  end-of-turn token as the engine's are.
  `budget` (the run's AgentConfig): a task whose reference solution needs more turns or tokens
  than it allows is dropped, with a line through `say`; none left is a one-line ValueError.
  `refuse`: families whose reference solutions must never be trained on (a task split's
  training and unseen families, rl.runtime.task_sources.SplitTasks): any such task is an error.
  """
  banned = sorted({t.id for t in tasks if family(t.id) in refuse})
  if banned:
    raise ValueError(
      f"demonstrations: {len(banned)} task(s) of families without demonstrations "
      f"({', '.join(sorted(refuse))}), e.g. {banned[0]}: their reference solutions stay out of training"
    )
  rng = np.random.default_rng(seed)
  right_u, which = rng.random(len(tasks)), rng.integers(0, 1 << 30, len(tasks))

  def actions(i, task):
    acts = tool_actions(i, task)
    if protocol != "markdown_bash":
      return acts
    cmds = [as_command(parse_tool_call(a)) for a in acts]
    cmds = [c for c in cmds if c.strip()] or [""]
    cmds[-1] = f"{cmds[-1]}\n{markdown_bash.SENTINEL}".lstrip("\n")
    return [markdown_bash.format_action(c) for c in cmds]

  def tool_actions(i, task):
    meta = dict(task.metadata)
    if teacher_accuracy < 1.0 and right_u[i] >= teacher_accuracy:
      wrong = meta.get("teacher_mistakes")
      if not wrong:
        raise ValueError(
          f"sft.teacher_accuracy={teacher_accuracy}: task {task.id} has no teacher_mistakes "
          "in its metadata (procedural families that have them: echo_word)"
        )
      cmd = wrong[which[i] % len(wrong)]
    elif meta.get("demo_actions"):
      return list(meta["demo_actions"])
    else:
      cmd = task.solution_script.strip()
    return [format_tool_call("shell", command=cmd), format_tool_call("finish")]

  acts = [actions(i, t) for i, t in enumerate(tasks)]
  if budget is not None:
    tasks, acts = within_budget(tasks, acts, tok, budget, say)

  def one(i_task):
    i, task = i_task
    policy = ScriptedPolicy(tok, acts[i], append_eos=protocol == "markdown_bash")
    return episodes(task, f"demo-{task.id}", 0, policy=policy)

  keep_failed = teacher_accuracy < 1.0
  kept = lambda o: not o.infra_error and (keep_failed or o.passed)  # noqa: E731
  with concurrent.futures.ThreadPoolExecutor(workers) as ex:
    outs = list(ex.map(one, enumerate(tasks)))
    # A reference that fails once (a sandbox or verifier hiccup) is replayed once: a dropped
    # demonstration shifts every batch the warm start draws, so it must not be left to chance.
    again = [i for i, o in enumerate(outs) if not kept(o)]
    for i, o in zip(again, ex.map(one, [(i, tasks[i]) for i in again]), strict=True):
      outs[i] = o
  for task, o in zip(tasks, outs, strict=True):
    if not kept(o):
      why = o.infra_error or f"the verifier failed the reference (reward {o.reward})"
      say(f"[sft] no demonstration of {task.id} (twice): {why}")
  # "slot": the task's place among the `slots` tasks; the warm start draws slots, not list
  # positions, so a demonstration that is missing shifts no other batch.
  return [
    {
      "tokens": s.tokens,
      "loss_mask": s.loss_mask,
      "passed": o.passed,
      "slot": i,
      "slots": len(tasks),
    }
    for i, o in enumerate(outs)
    if kept(o)
    for s in o.episode.segments
  ]


def _needs(acts: list[str], tok) -> tuple[int, int, int]:
  """(turns, tokens of the longest turn, tokens in all) a demonstration's actions take; a
  closing `finish` needs no turn of its own (the turn budget ends the episode as well)."""
  lens = [len(tok.encode(a)) + 1 for a in acts]  # + the end-of-turn token
  turns = len(acts) - (len(acts) > 1 and acts[-1] == format_tool_call("finish"))
  return turns, max(lens[:turns] or [0]), sum(lens[:turns])


def within_budget(tasks, acts, tok, budget, say):
  """The tasks (and their actions) whose demonstration fits the agent's budget; a line per
  dropped task; a one-line ValueError naming the budget and the longest solution if none."""
  keep, needs = [], []
  for task, a in zip(tasks, acts, strict=True):
    turns, turn_tokens, total = need = _needs(a, tok)
    needs.append((need, task.id))
    over = [
      f"{turns} turns > agent.max_turns={budget.max_turns}" * (turns > budget.max_turns),
      f"{turn_tokens} tokens in a turn > agent.max_new_tokens={budget.max_new_tokens}"
      * (turn_tokens > budget.max_new_tokens),
      f"{total} tokens > agent.max_episode_tokens={budget.max_episode_tokens}"
      * (total > budget.max_episode_tokens),
    ]
    if any(over):
      say(f"warning: demonstration of {task.id} dropped: its reference solution needs "
          f"{'; '.join(o for o in over if o)}")  # fmt: skip
    else:
      keep.append((task, a))
  if needs and not keep:
    (turns, turn_tokens, _), tid = max(needs)
    raise ValueError(
      f"warm start: no reference solution fits the turn budget (agent.max_turns="
      f"{budget.max_turns}, agent.max_new_tokens={budget.max_new_tokens}); the longest, "
      f"{tid}, needs {turns} turns and {turn_tokens} tokens in a turn: raise the budget "
      "(--config.agent.*) or shorten solution/solve.sh"
    )
  return [t for t, _ in keep], [a for _, a in keep]


def as_command(call) -> str:
  """A tool call as the shell command a markdown-bash reply runs ("" for `finish`)."""
  if call.name == "write_file":
    path, content = call.arguments["path"], call.arguments["content"]
    return f"printf '%s' {shlex.quote(content)} > {shlex.quote(path)}"
  return call.arguments.get("command", "")


def demo_slot_ids(demos: list[dict]) -> tuple[int, list[int]]:
  """(number of slots, each demonstration's slot): the tasks' slots where `demonstrations`
  recorded them, else (demonstrations saved before slots existed) one slot per demonstration."""
  if demos and "slot" in demos[0]:
    return int(demos[0]["slots"]), [int(d["slot"]) for d in demos]
  return len(demos), list(range(len(demos)))


def demo_slots(demos: list[dict]) -> tuple[int, dict[int, list[dict]]]:
  """(number of slots, slot -> its demonstrations), by `demo_slot_ids`."""
  n_slots, ids = demo_slot_ids(demos)
  by_slot = {}
  for d, j in zip(demos, ids, strict=True):
    by_slot.setdefault(j, []).append(d)
  return n_slots, by_slot


def warm_start(
  exp: Experiment,
  model_cfg,
  mesh,
  params,
  demos: list[dict],
  tel,  # rl.runtime.telemetry.Telemetry, or None (no logging)
  pad_id: int,
  comm,
  stop=None,
  saves=None,
):
  """Supervised steps on demonstrations (see module docstring); returns the TrainState.

  `stop()` true (Ctrl-C) ends the steps early, at a step boundary. `saves`
  (rl.runtime.warm_checkpoints.WarmCheckpoints, or None): the state is saved as it goes and a
  saved one is resumed, drawing the batches an uninterrupted run would have drawn.

  `comm`: rl.runtime.multihost's channel (`Local()` in one process); in a multi-process job
  every process runs this with the same demos;
  only process 0 has `tel`. The state is on the host (params, and the AdamW moments that
  `sft.carry_moments` hands to RL).
  """
  s = exp.sft
  if not demos:
    raise ValueError(
      "warm start: no demonstration passed the verifier (check the tasks' reference solutions: "
      "python -m launch.check_tasks --tasks=... --out=DIR; or set --config.sft.steps=0)"
    )
  cfg = TrainConfig(
    loss=supervised_loss(s.entropy_coef),
    optim=OptimConfig(
      lr=s.lr,
      warmup_steps=s.warmup_steps,
      decay_steps=max(s.steps, 1),
      end_lr_ratio=s.end_lr_ratio,
      max_grad_norm=1.0,
    ),
    mesh=exp.train.mesh,
    rules=exp.train.rules,
  )
  state, shardings = create_train_state(model_cfg, cfg, mesh, jax.random.key(s.seed), params=params)
  rng = np.random.default_rng(s.seed)
  n_slots, by_slot = demo_slots(demos)
  draw = lambda: rng.choice(n_slots, s.batch_size, replace=n_slots < s.batch_size)  # noqa: E731
  start, saved = 0, saves.restore(state) if saves is not None else None
  if saved is not None:
    state, start = saved
    for _ in range(start):  # the batches the saved steps drew
      draw()
    if tel is not None:
      tel.write(f"[sft] resumed the warm start after step {start} of {s.steps}")
  mult = row_multiple(mesh, 1)
  step_fn = logp_fn = None
  for i in range(start, s.steps):
    if stop is not None and stop():  # Ctrl-C: at the next step, not after the whole warm start
      if saves is not None:
        saves.save(i, state, force=True)
      if tel is not None:
        tel.write(f"[sft] stopped at warm-start step {i} of {s.steps}")
      break
    seqs = [d for j in draw() for d in by_slot.get(int(j), ())]
    if seqs:
      batch = sft_batch(seqs, exp.loop.row_len, exp.loop.max_segments, mult, pad_id)
      on_mesh = comm.batch(batch, mesh, cfg.rules)
      if step_fn is None:
        step_fn = make_train_step(model_cfg, cfg, mesh, shardings, on_mesh)
        # The LM head only at loss tokens (all the nll reads): at 16 x 768 rows and a 49k vocab
        # the full head's fp32 logits alone are 2.4 GB, and a run was OOM-killed at 22 GB.
        logp_fn = make_compute_logprobs(
          model_cfg, cfg, mesh, shardings.params, on_mesh, loss_only=True
        )
      if i % s.log_every == 0 or i == s.steps - 1:
        logp = np.asarray(comm.to_host(comm.call(logp_fn, state.params, on_mesh)))
        mask = batch["loss_mask_BT"] * (batch["positions_BT"] > 0)
        nll = float(-(logp * mask).sum() / max(mask.sum(), 1))
        if tel is not None:
          tel.log(i, {"sft/nll": nll}, progress=False)
          tel.write(f"[sft] step {i}/{s.steps}: nll/token {nll:.4f}")
      state, _ = comm.call(step_fn, state, on_mesh)
    elif tel is not None:  # every task drawn lost its demonstration: no update, draws go on
      tel.write(f"[sft] step {i}/{s.steps}: no demonstration among the tasks drawn, skipped")
    if saves is not None:
      saves.save(i + 1, state, force=i + 1 == s.steps)
  return comm.to_host(state)


def carry_moments(opt_state, sft_opt_state, shardings):
  """`opt_state` with the AdamW second moments and count of `sft_opt_state`, as `shardings`.

  The first moments stay zero (fresh), and the learning-rate schedule's own count starts at
  0, so RL's warmup and decay run as configured.
  """

  def pick(rl, sft):
    if isinstance(rl, optax.ScaleByAdamState):
      return rl._replace(nu=sft.nu, count=sft.count)
    return rl

  is_adam = lambda x: isinstance(x, optax.ScaleByAdamState)  # noqa: E731
  return jax.device_put(jax.tree.map(pick, opt_state, sft_opt_state, is_leaf=is_adam), shardings)


def rl_state(exp: Experiment, model_cfg, mesh, params, sft):
  """RL's TrainState and shardings: from the warm start's params (`sft`, its host TrainState,
  or None: `params`), with its AdamW moments when `sft.carry_moments`."""
  if sft is not None:
    params = sft.params
  key = jax.random.key(exp.loop.seed)
  state, shardings = create_train_state(model_cfg, exp.train, mesh, key, params=params)
  if sft is not None and exp.sft.carry_moments:
    opt = carry_moments(state.opt_state, sft.opt_state, shardings.opt_state)
    state = state.replace(opt_state=opt)
  return state, shardings
