r"""A plain `openai`-client agent: the smallest harness the gateway can train and evaluate.

As a harness (`run(base_url, runner, instruction)`), it is what envs.harness.ExternalEpisodes
calls per episode with the episode's base URL and a command runner bound to its sandbox.
Standalone, it evaluates a served model on a built-in task in a bubblewrap sandbox:

  python -m launch.serve --api=openai --checkpoint=DIR --model_name=policy &
  python examples/openai_client_agent.py --base_url=http://127.0.0.1:8000/v1 \
      --model=policy --task=core/fo-mkdir-tree
"""

from __future__ import annotations

import argparse
import json
import sys

import openai

TOOLS = [
  {"type": "function", "function": {
    "name": "shell", "description": "Run a bash command in the task's workspace.",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                   "required": ["command"]}}},
  {"type": "function", "function": {
    "name": "finish", "description": "Stop: the task is done.",
    "parameters": {"type": "object", "properties": {}}}},
]  # fmt: skip


def run(base_url: str, runner, instruction: str, *, model: str = "agentrl", max_turns: int = 10,
        max_tokens: int = 256, temperature: float = 1.0, on_turn=None) -> dict:  # fmt: skip
  """Chat with tools until `finish` or max_turns; every shell call runs through `runner`.

  A conversation that outgrows the model's context ends the episode (as the built-in agent's
  does): `{"finished": False, "stop": "context_length_exceeded", ...}`. `on_turn(turn, text)`
  hears what each turn did."""
  client = openai.OpenAI(base_url=base_url, api_key="none", max_retries=0)
  msgs = [{"role": "system", "content": "Solve the task in the shell."},
          {"role": "user", "content": instruction}]  # fmt: skip
  say = on_turn or (lambda turn, text: None)
  for turn in range(max_turns):
    try:
      r = client.chat.completions.create(
        model=model, messages=msgs, tools=TOOLS, max_tokens=max_tokens, temperature=temperature
      )
    except openai.BadRequestError as e:
      if (e.body or {}).get("code") != "context_length_exceeded":
        raise
      say(turn + 1, "the conversation no longer fits the model's context: stopped")
      return {"finished": False, "turns": turn, "stop": "context_length_exceeded"}
    msg = r.choices[0].message
    msgs.append(msg.model_dump(exclude_none=True))
    if not msg.tool_calls:
      say(turn + 1, "no tool call")
      msgs.append({"role": "user", "content": "Call a tool (shell or finish)."})
      continue
    for call in msg.tool_calls:
      if call.function.name == "finish":
        say(turn + 1, "finish")
        return {"finished": True, "turns": turn + 1}
      command = json.loads(call.function.arguments).get("command", "")
      res = runner.run(command)
      say(turn + 1, f"shell {command[:60]!r} -> exit {res.exit_code}")
      out = f"exit code: {res.exit_code}\n{res.stdout}{res.stderr}"[-4000:]
      msgs.append({"role": "tool", "tool_call_id": call.id, "content": out})
  return {"finished": False, "turns": max_turns}


def main() -> None:
  from envs.grading.verifier import Verifier
  from envs.harness import SandboxRunner
  from envs.task import BUILTIN_DIR, load_task
  from envs.task_env import open_task_sandbox

  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--base_url", default="http://127.0.0.1:8000/v1")
  p.add_argument("--model", default="agentrl")
  p.add_argument("--task", default="core/fo-mkdir-tree", help="suite/name of a built-in task")
  p.add_argument("--max_turns", type=int, default=10)
  args = p.parse_args()
  suite = args.task.split("/")[0]
  task = load_task(BUILTIN_DIR / args.task, suite)
  with open_task_sandbox(task) as ts:
    progress = lambda turn, text: print(f"turn {turn}/{args.max_turns}: {text}", file=sys.stderr,
                                        flush=True)  # fmt: skip
    info = run(args.base_url, SandboxRunner(ts.sandbox), task.instruction, model=args.model,
               max_turns=args.max_turns, on_turn=progress)  # fmt: skip
    grade = Verifier().grade(ts)
  print(json.dumps({"task": task.id, **info, "passed": grade.passed, "reward": grade.reward}))


if __name__ == "__main__":
  main()
