"""A GRPO step on gateway-captured trajectories equals the same step on our agent loop's
trajectories: the captured outcome goes through the loop's own row builder (episode_row),
batch builder and jitted update, and every array and parameter comes out identical."""

import jax
import numpy as np
import openai

from envs import sandbox as sandbox_lib
from envs.agents import agent
from envs.agents.tool_format import (
  DEFAULT_SYSTEM_PROMPT,
  TOOL_CALL_CLOSE,
  ChatFormat,
  ToolCallError,
  format_exec_observation,
  format_tool_call,
  parse_tool_call,
  truncate_middle,
)  # fmt: skip
from envs.episodes import Outcome
from envs.gateway import BackgroundServer, Gateway, make_app
from envs.sandbox.base import SandboxSpec
from envs.task import BUILTIN_DIR, load_task
from models.config import tiny
from models.io.tokenizer import ByteTokenizer
from parallel.mesh import single_device_mesh
from rl.batch import build_batch
from rl.config import LossConfig, OptimConfig, TrainConfig
from rl.runtime.records import Group, episode_row
from rl.train_state import create_train_state
from rl.train_step import make_train_step

TOK = ByteTokenizer()
TASK = load_task(BUILTIN_DIR / "core" / "fo-mkdir-tree", "core")
SCRIPTS = [
  [format_tool_call("shell", command="mkdir -p project/src"), format_tool_call("finish")],
  ["thinking", format_tool_call("shell", command="ls"), format_tool_call("finish")],
]
REWARDS = [1.0, 0.0]
# XLA backend optimisation off: the same computation, half the CPU compile time.
FAST = {"xla_backend_optimization_level": 0}
CFG = agent.AgentConfig(max_turns=4, max_new_tokens=120)
SPEC = SandboxSpec(exec_timeout_s=20, episode_timeout_s=120)


def _harness(base_url, box):
  """A plain openai-client agent speaking the agent loop's protocol."""
  client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0)
  msgs = [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
          {"role": "user", "content": TASK.instruction}]  # fmt: skip
  for _ in range(CFG.max_turns):
    r = client.chat.completions.create(
      model="m", messages=msgs, max_tokens=CFG.max_new_tokens, stop=[TOOL_CALL_CLOSE]
    )
    text = r.choices[0].message.content
    msgs.append({"role": "assistant", "content": text})
    try:
      call = parse_tool_call(text + TOOL_CALL_CLOSE)
    except ToolCallError as e:
      msgs.append({"role": "tool", "content": f"error: {e}"})
      continue
    if call.name == "finish":
      return
    res = box.exec(call.arguments["command"], timeout_s=CFG.exec_timeout_s)
    obs = format_exec_observation(res.exit_code, res.stdout, res.stderr, res.timed_out)
    msgs.append({"role": "tool", "content": truncate_middle(obs, CFG.max_obs_chars)})


def _groups():
  ours, theirs = [], []
  for i, (script, reward) in enumerate(zip(SCRIPTS, REWARDS, strict=True)):
    with sandbox_lib.make("bwrap", SPEC) as box:
      ep = agent.run_episode(
        agent.ScriptedPolicy(TOK, script), ChatFormat(TOK), box, TASK.instruction, CFG,
        episode_id=f"a{i}",
      )  # fmt: skip
    ours.append(episode_row(TASK, 0, i, Outcome(ep, reward)))
    gw = Gateway(agent.ScriptedPolicy(TOK, script), TOK, model_name="m")
    with BackgroundServer(make_app(gw)) as srv, sandbox_lib.make("bwrap", SPEC) as box:
      gw.open_episode(f"b{i}")
      _harness(srv.base_url(f"b{i}"), box)
      captured = gw.close_episode(f"b{i}").episode()
    theirs.append(episode_row(TASK, 0, i, Outcome(captured, reward)))
  return Group(0, TASK.id, ours), Group(0, TASK.id, theirs)


def test_grpo_step_on_captured_equals_agent_trajectories():
  ours, theirs = _groups()
  keys = ("tokens", "loss_mask", "logprobs", "versions", "segment_lengths", "reward")
  for a, b in zip(ours.rows, theirs.rows, strict=True):
    assert {k: a[k] for k in keys} == {k: b[k] for k in keys}
  loss = LossConfig(advantage="grpo")
  batches = [build_batch([g], loss, 1024, 2, 1, TOK.pad_id)[0] for g in (ours, theirs)]
  for k in batches[0]:
    np.testing.assert_array_equal(batches[0][k], batches[1][k], err_msg=k)
  model = tiny("qwen3", vocab_size=TOK.vocab_size, d_model=32, n_heads=4, n_kv_heads=2,
               head_dim=8, d_ff=64, max_seq_len=1024)  # fmt: skip
  cfg = TrainConfig(loss=loss, optim=OptimConfig(lr=1e-2, warmup_steps=0, decay_steps=10))
  mesh = single_device_mesh()
  state, shardings = create_train_state(model, cfg, mesh, jax.random.key(0))
  step = make_train_step(model, cfg, mesh, shardings, batches[0], compiler_options=FAST)
  out = []
  for batch in batches:  # the same initial state (the step donates it: built again)
    state, _ = create_train_state(model, cfg, mesh, jax.random.key(0))
    state, metrics = step(state, batch)
    out.append((jax.device_get(state.params), jax.device_get(metrics)))
  (p0, m0), (p1, m1) = out
  assert float(m0["loss"]) != 0.0  # the step did something (non-zero advantages)
  jax.tree.map(np.testing.assert_array_equal, p0, p1)
  jax.tree.map(np.testing.assert_array_equal, m0, m1)
