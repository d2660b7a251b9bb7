"""agent.kind=external through the loop's replica: mini-swe-agent (unmodified) samples from the
tiny policy through the replica's gateway in a real sandbox; the outcome is the loop's Outcome
with the captured trajectory (its format errors break the prefix: new, counted segments)."""

import dataclasses

import jax
import pytest

from envs.agents.agent import AgentConfig
from envs.episodes import Outcome
from envs.task import BUILTIN_DIR, load_task
from models import config as mcfg
from models import transformer
from models.io.tokenizer import ByteTokenizer
from rl.config import EngineConfig
from rl.runtime.replica import Replica

TASK = load_task(BUILTIN_DIR / "core" / "fo-mkdir-tree", "core")


def test_external_agent_kind_runs_mini_swe_agent_on_the_policy():
  tok = ByteTokenizer()
  cfg = mcfg.tiny("qwen3", vocab_size=tok.vocab_size, max_seq_len=8192)
  params = transformer.init(cfg, jax.random.key(0))
  agent = AgentConfig(kind="external")
  rep = Replica(cfg, params, tok, EngineConfig(slots=2, max_seq_len=8192), agent=agent)
  try:
    out = rep.episodes()(TASK, "g0000000-s00", seed=0)
  finally:
    rep.close()
  assert isinstance(out, Outcome) and out.infra_error is None and not out.passed
  assert out.harness_result["exit_status"] == "RepeatedFormatError"  # random weights: no calls
  ep = out.episode
  assert len(ep.turns) == 3 and len(ep.segments) == 3 and ep.elisions == 2
  assert ep.generated_tokens == sum(t.gen_tokens for t in ep.turns) > 0
  assert {v for s in ep.segments for v, m in zip(s.versions, s.loss_mask, strict=True) if m} == {0}


def test_unknown_agent_kind_and_harness_are_named():
  with pytest.raises(ValueError, match="AgentConfig.kind"):
    AgentConfig(kind="robot")
  from envs.harness import resolve_harness

  with pytest.raises(ValueError, match="AgentConfig.harness 'nope:run'"):
    resolve_harness("nope:run")
  assert dataclasses.replace(AgentConfig(), kind="external").harness.endswith("run_mini_swe_agent")
