"""The README's gateway + mini-swe-agent snippet, runnable: an external harness as the rollout agent.

The gateway serves a policy on 127.0.0.1 (an ephemeral port); mini-swe-agent, unmodified,
solves a core task in a bubblewrap sandbox through it; the verifier grades the sandbox and the
gateway's capture is the trajectory RL trains on.

  python examples/gateway_harness.py           # a tiny random model behind a real Generator
  python examples/gateway_harness.py --oracle  # a scripted policy replaying the reference

The random model never calls a tool: mini-swe-agent answers with its format error until its
step limit (reward 0) and leaves the bad reply out of its history, so each call starts a new
segment (`Episode.elisions`). The scripted one passes in one segment. Needs
`pip install -e .[harness]`.
"""

import json
import sys

import jax

from envs.agents.agent import ScriptedPolicy
from envs.gateway import BackgroundServer, Gateway, make_app
from envs.harness import ExternalEpisodes
from envs.harness.mini_swe import SUBMIT, run_mini_swe_agent
from envs.task import BUILTIN_DIR, load_task
from models import transformer
from models.config import tiny
from models.inference.engine import Engine
from models.inference.generator import Generator
from models.io.tokenizer import ByteTokenizer


def tiny_generator(tok) -> Generator:
  """A tiny random model (2 layers, width 64) whose context holds mini-swe-agent's prompt."""
  cfg = tiny("qwen3", vocab_size=tok.vocab_size, max_seq_len=8192)
  engine = Engine(cfg, transformer.init(cfg, jax.random.key(0)), max_concurrent_decodes=2)
  return Generator(engine, tokenizer=tok, prefix_caching=True, warmup=False)


def oracle_policy(tok, task) -> ScriptedPolicy:
  """Two replies in mini-swe-agent's bash tool: the reference solution, then submit."""
  calls = [{"name": "bash", "arguments": {"command": c}} for c in (task.solution_script,
           f"echo {SUBMIT}")]  # fmt: skip
  return ScriptedPolicy(tok, [f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls])


def main(policy: str = "tiny", backend: str = "bwrap"):
  tok = ByteTokenizer()
  task = load_task(BUILTIN_DIR / "core" / "fo-mkdir-tree", "core")
  generator = oracle_policy(tok, task) if policy == "oracle" else tiny_generator(tok)
  gw = Gateway(generator, tok, model_name="policy")  # the training run's Generator
  server = BackgroundServer(make_app(gw))  # 127.0.0.1, an ephemeral port
  harness = lambda url, runner, task_text: run_mini_swe_agent(  # noqa: E731
    url, runner, task_text, model_name="policy", step_limit=2
  )
  episodes = ExternalEpisodes(gw, server, harness, backend=backend)
  try:
    outcome = episodes(task, "g0000001-s00", seed=0)  # .passed, .reward, .episode.segments
  finally:
    server.close()
    if isinstance(generator, Generator):
      generator.close()
  ep = outcome.episode
  print(f"{task.id} ({policy}): passed={outcome.passed} reward={outcome.reward:.1f} "
        f"harness exit={(outcome.harness_result or {}).get('exit_status')} "
        f"infra_error={outcome.infra_error}")  # fmt: skip
  print(f"captured: {len(ep.segments)} segment(s), {sum(len(s.tokens) for s in ep.segments)} "
        f"tokens, {ep.generated_tokens} generated (loss mask 1), {len(ep.turns)} turns, "
        f"{ep.elisions} elision(s)")  # fmt: skip
  return outcome


if __name__ == "__main__":
  main("oracle" if "--oracle" in sys.argv[1:] else "tiny")
