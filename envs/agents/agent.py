"""The agent loop: multi-turn tool-calling episodes in a sandbox, token-in/token-out.

The protocol is the format object's (`AgentConfig.protocol`, `make_format`): the Hermes
tool-call format of envs.agents.tool_format, or markdown-bash (envs.agents.markdown_bash: one ```bash block
per reply, a sentinel command to finish, which runs the rest of its block first). A malformed
action becomes an error observation and the episode goes on; it never raises.

Token-in/token-out: a trajectory keeps exactly the tokens and logprobs the engine produced.
Each turn's prompt is the previous context + the new observation tokens (the tokenizer's chat
template is rendered once per observation and only the *new* text is tokenised, never earlier
turns), so the engine's `session_id` prefix reuse applies. Observation tokens have loss mask 0.

Context budget: an observation longer than `max_obs_chars` keeps its head and tail around a
`[... N chars truncated ...]` marker. When the next generation would not fit in
`max_context_tokens`, the observations of all but the `keep_recent_turns` most recent turns are
replaced by an elision marker (instruction and recent turns kept). That breaks the token prefix,
so the episode starts a new *segment*: a fresh engine session re-prefills the shortened context.
Every generated token is trained exactly once, in the segment whose context produced it (the
earlier actions are plain context, mask 0, in later segments).

Fault tolerance (`snapshot_every_turn`): the workspace is snapshotted before each action; an
action after which the workspace directory is gone or emptied is rolled back and reported.

An episode ends on `finish`, the turn / generated-token / wall-clock budget, an exhausted
context, or an infrastructure failure (SandboxError or an engine error): then `infra_error`
is set and the host loop retries or masks the episode; it never reads as reward 0.
"""

from __future__ import annotations

import dataclasses
import time
import uuid

from envs.agents.episode import Episode, Segment, TurnRecord, time_budget
from envs.agents.markdown_bash import FormatError, MarkdownBashFormat
from envs.agents.tool_format import (
  DEFAULT_SYSTEM_PROMPT,
  ELIDED,
  TOOL_CALL_CLOSE,
  ChatFormat,
  ToolCall,
  ToolCallError,
  truncate_middle,
)
from envs.sandbox.base import Sandbox, SandboxError
from models.inference.generator import GenerationRequest
from models.sampling import SamplingParams

PROTOCOLS = ("tool_call", "markdown_bash")


@dataclasses.dataclass(frozen=True)
class AgentConfig:
  """Budgets and sampling of one episode."""

  max_turns: int = 8
  max_new_tokens: int = 256  # per turn
  max_episode_tokens: int = 2048  # generated tokens over the whole episode
  max_context_tokens: int = 4096  # context + one turn's generation must fit
  max_obs_chars: int = 2000
  keep_recent_turns: int = 2
  episode_timeout_s: float = 600.0
  exec_timeout_s: float = 30.0
  generation_timeout_s: float = 600.0
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  greedy: bool = False
  snapshot_every_turn: bool = False
  # "loop": this module's agent; "external": a harness on an OpenAI client through the gateway
  # (envs.harness.ExternalEpisodes), named "module:function" by `harness`.
  kind: str = "loop"
  harness: str = "envs.harness.mini_swe:run_mini_swe_agent"
  protocol: str = "tool_call"  # tool_call (Hermes <tool_call> JSON) | markdown_bash

  def __post_init__(self):
    if self.kind not in ("loop", "external"):
      raise ValueError(f"AgentConfig.kind must be 'loop' or 'external', got {self.kind!r}")
    if self.protocol not in PROTOCOLS:
      raise ValueError(f"AgentConfig.protocol: {self.protocol!r} is not one of {PROTOCOLS}")
    for f in ("max_turns", "max_new_tokens", "max_episode_tokens", "max_context_tokens"):
      if getattr(self, f) <= 0:
        raise ValueError(f"AgentConfig.{f} must be > 0, got {getattr(self, f)}")

  def sampling(self, seed: int = 0) -> SamplingParams:
    """How the engine samples this agent's turns; the RL loss scores at this temperature."""
    return SamplingParams(self.temperature, self.top_k, self.top_p, self.greedy, seed=seed)


def make_format(protocol: str, tokenizer, system_prompt: str | None = None):
  """The format object of `protocol`; system_prompt None: the protocol's own default.

  markdown-bash keeps its versioned prompt file unless given another one: the tool-call
  default prompt (EnvConfig's default) and "" both mean the file.
  """
  if protocol == "tool_call":
    return ChatFormat(tokenizer, DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt)
  if protocol == "markdown_bash":
    own = system_prompt if system_prompt not in (None, "", DEFAULT_SYSTEM_PROMPT) else None
    return MarkdownBashFormat(tokenizer, own)
  raise ValueError(f"agent.protocol: {protocol!r} is not one of {PROTOCOLS}")


def run_episode(
  policy,
  fmt: ChatFormat,
  sandbox: Sandbox,
  instruction: str,
  cfg: AgentConfig,
  *,
  episode_id: str,
  seed: int = 0,
) -> Episode:
  """Runs one episode. `policy` has the Generator API: submit(req) -> Future, release_session."""
  return _Runner(policy, fmt, sandbox, instruction, cfg, episode_id, seed).run()


class LoopAgent:
  """This module's loop as an agent of the one protocol (envs.agents.episode): a policy with
  the Generator API, a format and an AgentConfig. `run(..., policy=p)` samples from `p`."""

  name = "policy"

  def __init__(self, policy, fmt, cfg: AgentConfig):
    self.policy, self.fmt, self.cfg = policy, fmt, cfg

  def run(self, sb, task, seed=0, on_turn=None, episode_id=None, policy=None) -> Episode:
    policy = policy or self.policy
    if on_turn is not None:
      policy = _TurnHook(policy, on_turn)
    cfg = dataclasses.replace(
      self.cfg, episode_timeout_s=time_budget(task, self.cfg.episode_timeout_s)
    )
    episode_id = episode_id or f"{task.id}#{seed}#{uuid.uuid4().hex[:8]}"
    return run_episode(
      policy, self.fmt, sb, task.instruction, cfg, episode_id=episode_id, seed=seed
    )


class _TurnHook:
  """The Generator API around `policy`: request n+1 means turn n has acted, so call
  `on_turn(n)` first (the evaluation's per-turn checks)."""

  def __init__(self, policy, on_turn):
    self._policy, self._on_turn, self.requests = policy, on_turn, 0

  def submit(self, req):
    if self.requests > 0:
      self._on_turn(self.requests)
    self.requests += 1
    return self._policy.submit(req)

  def release_session(self, session_id: str) -> None:
    self._policy.release_session(session_id)


class _Runner:
  """The state of one running episode (split out so each step stays short)."""

  def __init__(self, policy, fmt, sandbox, instruction, cfg, episode_id, seed):
    self.policy, self.fmt, self.sandbox, self.cfg = policy, fmt, sandbox, cfg
    self.episode_id, self.seed = episode_id, seed
    self.prompt = fmt.prompt(instruction)
    self.history: list[tuple[list[int], list[int]]] = []  # (action tokens, obs tokens) per turn
    self.segments = [Segment()]
    self.segments[0].extend(self.prompt)
    self.turns: list[TurnRecord] = []
    self.elisions = 0
    self.generated = 0
    self.start = time.monotonic()

  @property
  def session_id(self) -> str:
    return f"{self.episode_id}/{len(self.segments) - 1}"

  def run(self) -> Episode:
    reason, infra = "max_turns", None
    try:
      for turn in range(self.cfg.max_turns):
        reason = self._budget_reason()
        if reason is None:
          reason = self._turn(turn)
        if reason is not None:
          break
      else:
        reason = "max_turns"
    except (SandboxError, _EngineError) as e:
      reason, infra = "infra", f"{type(e).__name__}: {e}"
    finally:
      self.policy.release_session(self.session_id)
    for seg in self.segments:
      seg.trim()
    return Episode(
      self.episode_id,
      self.segments,
      self.turns,
      reason,
      infra,
      self.elisions,
      time.monotonic() - self.start,
    )

  def _budget_reason(self) -> str | None:
    if time.monotonic() - self.start >= self.cfg.episode_timeout_s:
      return "time_budget"
    if self.generated >= self.cfg.max_episode_tokens:
      return "token_budget"
    if not self._fit_context():
      return "context"
    return None

  def _turn(self, turn: int) -> str | None:
    """One action + observation; returns a finish reason or None to go on."""
    t0 = time.monotonic()
    res = self._generate(turn)
    seg = self.segments[-1]
    seg.extend(res.tokens, 1, res.logprobs, res.versions)
    self.generated += len(res.tokens)
    action = self.fmt.tokenizer.decode(res.tokens)
    t1 = time.monotonic()
    call, err = None, None
    try:
      call = self.fmt.parse(action)
    except ToolCallError as e:
      # markdown-bash's format errors are whole messages; tool-call errors keep their prefix
      err = str(e) if isinstance(e, FormatError) else f"error: {e}"
    rec = TurnRecord(
      action, call.name if call else None, err, gen_tokens=len(res.tokens), gen_s=t1 - t0
    )
    self.turns.append(rec)
    if call is not None and call.name == "finish":
      if call.arguments.get("command", "").strip():  # markdown-bash: the block's other lines
        self._act(call, rec)
      self.history.append((list(res.tokens), []))
      return "finish"
    obs = self._act(call, rec) if call is not None else truncate_middle(err, self.cfg.max_obs_chars)
    rec.env_s = time.monotonic() - t1
    ended_eos = bool(res.tokens) and res.tokens[-1] in self.fmt.stop_ids
    obs_tokens = self.fmt.observation(obs, res.tokens[-1] if ended_eos else None)
    seg.extend(obs_tokens)
    self.history.append((list(res.tokens), obs_tokens))
    return None

  def _generate(self, turn: int):
    cfg = self.cfg
    ctx = self.segments[-1].tokens
    budget = min(
      cfg.max_new_tokens, cfg.max_episode_tokens - self.generated, cfg.max_context_tokens - len(ctx)
    )
    req = GenerationRequest(
      prompt_tokens=list(ctx),
      max_new_tokens=budget,
      sampling=cfg.sampling(seed=(self.seed * 1000003 + turn) & 0x7FFFFFFF),
      stop_token_ids=self.fmt.stop_ids,
      stop_strings=tuple(self.fmt.stop_strings),
      session_id=self.session_id,
    )
    try:
      res = self.policy.submit(req).result(timeout=cfg.generation_timeout_s)
    except Exception as e:  # a hung or failed engine is infrastructure, not the policy's fault
      raise _EngineError(f"generation failed: {type(e).__name__}: {e}") from e
    if res.finish_reason == "error":
      raise _EngineError("engine returned finish_reason='error'")
    return res

  def _act(self, call: ToolCall, rec: TurnRecord) -> str:
    """Executes a tool call in the sandbox (with optional rollback); returns the observation."""
    snap = self.sandbox.snapshot() if self.cfg.snapshot_every_turn else None
    before = self._workspace_entries() if snap else 0
    remaining = self.cfg.episode_timeout_s - (time.monotonic() - self.start)
    timeout = max(1.0, min(self.cfg.exec_timeout_s, remaining))
    rec.command = call.arguments.get("command") or f"write_file {call.arguments.get('path')}"
    if call.name == "write_file":
      self.sandbox.write_file(call.arguments["path"], call.arguments["content"])
      n, path = len(call.arguments["content"]), call.arguments["path"]
      rec.exit_code, obs = 0, truncate_middle(f"wrote {n} chars to {path}", self.cfg.max_obs_chars)
    else:
      r = self.sandbox.exec(call.arguments["command"], timeout_s=timeout)
      rec.exit_code = r.exit_code
      obs = self.fmt.format_output(
        r.exit_code, r.stdout, r.stderr, timed_out=r.timed_out, max_chars=self.cfg.max_obs_chars
      )
    if snap is not None and before > 0 and self._workspace_entries() == 0:
      self.sandbox.restore(snap)
      rec.rolled_back = True
      obs += "\n[this action destroyed the workspace; it was rolled back]"
    return obs

  def _workspace_entries(self) -> int:
    r = self.sandbox.exec("ls -A . 2>/dev/null | wc -l", timeout_s=self.cfg.exec_timeout_s)
    try:
      return int(r.stdout.strip() or 0) if r.exit_code == 0 else 0
    except ValueError:
      return 0

  def _fit_context(self) -> bool:
    """Elides old observations when the next turn would not fit; False if it cannot fit."""
    cfg, seg = self.cfg, self.segments[-1]
    room = lambda n: n + cfg.max_new_tokens <= cfg.max_context_tokens
    if room(len(seg.tokens)):
      return True
    marker = self.fmt.observation(ELIDED)
    keep_from = max(0, len(self.history) - cfg.keep_recent_turns)
    tokens = list(self.prompt)
    for i, (act, obs) in enumerate(self.history):
      tokens += act + (marker if i < keep_from and obs else obs)
    if not room(len(tokens)) or len(tokens) >= len(seg.tokens):
      return False
    self.policy.release_session(self.session_id)
    new = Segment()
    new.extend(tokens)
    self.segments.append(new)
    self.elisions += 1
    return True


class _EngineError(RuntimeError):
  pass


class ScriptedPolicy:
  """The Generator API replaying fixed action texts: demonstrations for SFT, and tests.

  Each submit() returns the next action's tokens (cut at `max_new_tokens`) with logprob 0 and
  version -1; after the script ends it repeats the last action. `append_eos`: end each action
  with the tokenizer's EOS, as an engine stopping at the end of its turn does.
  """

  def __init__(self, tokenizer, actions: list[str], append_eos: bool = False):
    if not actions:
      raise ValueError("ScriptedPolicy needs at least one action")
    self.tokenizer, self.actions, self.calls = tokenizer, list(actions), 0
    self.append_eos = append_eos
    self.prompts: list[list[int]] = []

  def submit(self, req):
    import concurrent.futures

    from models.inference.generator import GenerationResult

    self.prompts.append(list(req.prompt_tokens))
    text = self.actions[min(self.calls, len(self.actions) - 1)]
    self.calls += 1
    toks = (self.tokenizer.encode(text) + [self.tokenizer.eos_id] * self.append_eos)[
      : req.max_new_tokens
    ]
    reason = "stop_string" if text.endswith(TOOL_CALL_CLOSE) else "stop"
    fut = concurrent.futures.Future()
    fut.set_result(
      GenerationResult(toks, [0.0] * len(toks), [-1] * len(toks), reason, len(req.prompt_tokens), 0)
    )
    return fut

  def release_session(self, session_id: str) -> None:
    pass
