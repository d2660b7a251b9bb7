"""mini-swe-agent as the rollout agent: its DefaultAgent, our sandbox, the gateway as its model.

`SandboxEnvironment` is a mini-swe-agent Environment that executes each action through a
SandboxRunner (so commands run in our bubblewrap/Docker sandbox, not on the host);
`GatewayModel` is a mini-swe-agent Model on the plain `openai` client (no LiteLLM) pointed at
a gateway base URL, using mini-swe-agent's own bash tool and tool-call parsing. The prompts
come from mini-swe-agent's packaged tool-calling config (mini.yaml).
"""

from __future__ import annotations

import os
import platform
import shlex
import time

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")  # its banner goes to stdout at import

import openai  # noqa: E402
import yaml  # noqa: E402
from minisweagent import package_dir  # noqa: E402
from minisweagent.agents.default import DefaultAgent  # noqa: E402
from minisweagent.exceptions import FormatError, Submitted  # noqa: E402
from minisweagent.models.utils.actions_toolcall import (  # noqa: E402
  BASH_TOOL,
  format_toolcall_observation_messages,
  parse_toolcall_actions,
)
from pydantic import BaseModel  # noqa: E402

from envs.harness.runner import SandboxRunner  # noqa: E402

SUBMIT = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def packaged_config() -> dict:
  """mini-swe-agent's tool-calling config (agent and model templates)."""
  return yaml.safe_load((package_dir / "config" / "mini.yaml").read_text())


class SandboxEnvironmentConfig(BaseModel):
  cwd: str = ""
  timeout: int = 30


class SandboxEnvironment:
  """mini-swe-agent Environment over a SandboxRunner (see module docstring)."""

  def __init__(self, runner: SandboxRunner, **kwargs):
    self.runner = runner
    self.config = SandboxEnvironmentConfig(**kwargs)

  def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict:
    command = action.get("command", "")
    cwd = cwd or self.config.cwd
    if cwd:
      command = f"cd {shlex.quote(cwd)} && {command}"
    r = self.runner.run(command, timeout or self.config.timeout)
    info = f"the command timed out after {timeout or self.config.timeout} s" if r.timed_out else ""
    output = {"output": r.stdout + r.stderr, "returncode": r.exit_code, "exception_info": info}
    lines = output["output"].lstrip().splitlines(keepends=True)
    if lines and lines[0].strip() == SUBMIT and r.exit_code == 0:
      submission = "".join(lines[1:])
      raise Submitted(
        {"role": "exit", "content": submission,
         "extra": {"exit_status": "Submitted", "submission": submission}}
      )  # fmt: skip
    return output

  def get_template_vars(self, **kwargs) -> dict:
    # bwrap shares the host kernel; Docker reports the same uname fields.
    return {**self.config.model_dump(), **platform.uname()._asdict(), **kwargs}

  def serialize(self) -> dict:
    env = {
      "environment": self.config.model_dump(mode="json"),
      "environment_type": "agentrl.sandbox",
    }
    return {"info": {"config": env}}


class GatewayModelConfig(BaseModel):
  model_name: str
  base_url: str
  api_key: str = "none"
  model_kwargs: dict = {}
  timeout_s: float = 600.0
  observation_template: str = packaged_config()["model"]["observation_template"]
  format_error_template: str = packaged_config()["model"]["format_error_template"]


class GatewayModel:
  """mini-swe-agent Model on the `openai` client with mini-swe-agent's bash tool."""

  def __init__(self, **kwargs):
    self.config = GatewayModelConfig(**kwargs)
    self.client = openai.OpenAI(
      base_url=self.config.base_url, api_key=self.config.api_key, max_retries=0,
      timeout=self.config.timeout_s,
    )  # fmt: skip

  def query(self, messages: list[dict], **kwargs) -> dict:
    prepared = [{k: v for k, v in m.items() if k != "extra"} for m in messages]
    resp = self.client.chat.completions.create(
      model=self.config.model_name, messages=prepared, tools=[BASH_TOOL],
      **(self.config.model_kwargs | kwargs),
    )  # fmt: skip
    choice = resp.choices[0]
    try:
      actions = parse_toolcall_actions(
        choice.message.tool_calls or [], format_error_template=self.config.format_error_template,
        template_kwargs={"finish_reason": choice.finish_reason},
      )  # fmt: skip
    except FormatError as e:
      e.messages[0]["extra"].update(cost=0.0, response=resp.model_dump(mode="json"))
      raise
    message = choice.message.model_dump(mode="json", exclude_none=True)
    message["extra"] = {"actions": actions, "response": resp.model_dump(mode="json"), "cost": 0.0,
                        "timestamp": time.time()}  # fmt: skip
    return message

  def format_message(self, **kwargs) -> dict:
    return kwargs

  def format_observation_messages(self, message, outputs, template_vars=None) -> list[dict]:
    return format_toolcall_observation_messages(
      actions=message.get("extra", {}).get("actions", []), outputs=outputs,
      observation_template=self.config.observation_template, template_vars=template_vars,
    )  # fmt: skip

  def get_template_vars(self, **kwargs) -> dict:
    return self.config.model_dump()

  def serialize(self) -> dict:
    model = {"model": self.config.model_dump(mode="json"), "model_type": "agentrl.gateway"}
    return {"info": {"config": model}}


def run_mini_swe_agent(base_url: str, runner: SandboxRunner, instruction: str, *,
                       model_name: str = "agentrl", step_limit: int = 20,
                       model_kwargs: dict | None = None, timeout_s: int = 30) -> dict:  # fmt: skip
  """One mini-swe-agent run (a harness for envs.harness.ExternalEpisodes); its exit info."""
  cfg = packaged_config()["agent"]
  agent = DefaultAgent(
    GatewayModel(model_name=model_name, base_url=base_url, model_kwargs=model_kwargs or {}),
    SandboxEnvironment(runner, timeout=timeout_s),
    system_template=cfg["system_template"],
    instance_template=cfg["instance_template"],
    step_limit=step_limit,
    cost_limit=0.0,
  )
  return agent.run(instruction)
