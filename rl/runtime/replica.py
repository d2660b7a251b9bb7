"""One engine replica: tokenizer + engine + generator + sandboxed episode runners.

The local loop, each Ray rollout worker (rl.runtime.fleet), the policy agent of `launch.eval`
and `launch.serve` build their engine here, from one `EngineConfig`:

  rep = Replica(model_cfg, params, tok, exp.engine, exp.env, exp.agent)
  out = rep.episodes()(task, "g0000001-s00", seed)    # envs.episodes.SandboxEpisodes
  greedy = rep.episodes(dataclasses.replace(exp.agent, greedy=True))
  external = rep.episodes(dataclasses.replace(exp.agent, kind="external"))  # envs.harness
  rep.gen.load_params(params, version=3); rep.close()

Tokenizers: "byte", "bpe:<vocab size>" (trained once on a corpus, kept in WORKDIR/tokenizer),
or a Hugging Face checkpoint folder.
"""

from __future__ import annotations

import dataclasses
import pathlib
import threading

from envs.agents.agent import AgentConfig, make_format
from envs.agents.tool_format import format_exec_observation, format_tool_call
from envs.episodes import SandboxEpisodes
from rl.config import EngineConfig, EnvConfig


def make_engine(model_cfg, params, cfg: EngineConfig, version: int = 0):
  """A models.inference.engine.Engine sized by `cfg` (max_seq_len 0: the model's)."""
  from models.inference.engine import Engine

  return Engine(
    model_cfg.replace(dtype=cfg.dtype) if cfg.dtype else model_cfg,
    params,
    max_concurrent_decodes=cfg.slots,
    max_seq_len=cfg.max_seq_len or None,
    page_size=cfg.page_size,
    kv_dtype=cfg.kv_dtype,
    weight_dtype=cfg.weight_dtype,
    version=version,
    attention=cfg.attention,
  )


def generator(model_cfg, params, tokenizer, cfg: EngineConfig, version: int = 0):
  """A models.inference.generator.Generator over make_engine(...); with `cfg.kv_on_swap="reprefill"`
  wrapped in rl.runtime.weight_sync.ExactSwap (the KV-cache policy for weight swaps)."""
  from models.inference.generator import Generator
  from rl.runtime.weight_sync import ExactSwap

  engine = make_engine(model_cfg, params, cfg, version)
  gen = Generator(engine, tokenizer=tokenizer, prefix_caching=cfg.prefix_caching)
  return ExactSwap(gen) if cfg.kv_on_swap == "reprefill" else gen


class Replica:
  """A generator and, per agent config, an episode runner on it (see module docstring).

  The chat format follows `agent.protocol` (envs.agents.agent.make_format), one per protocol.
  """

  def __init__(
    self,
    model_cfg,
    params,
    tokenizer,
    engine: EngineConfig = EngineConfig(),
    env: EnvConfig = EnvConfig(),
    agent: AgentConfig = AgentConfig(),
    version: int = 0,
  ):
    self.tokenizer, self.env, self.agent = tokenizer, env, agent
    self.gen = generator(model_cfg, params, tokenizer, engine, version)
    self.fmt = make_format(agent.protocol, tokenizer, env.system_prompt)
    self._formats = {agent.protocol: self.fmt}
    self._episodes: dict[AgentConfig, SandboxEpisodes] = {}
    self._lock = threading.Lock()
    self._gateway = self._server = None  # built on the first agent.kind=external runner

  def episodes(self, agent: AgentConfig | None = None) -> SandboxEpisodes:
    """The episode runner for `agent` (default: the replica's), built once per config."""
    agent = agent or self.agent
    with self._lock:
      if agent not in self._episodes and agent.kind == "external":
        self._episodes[agent] = self._external(agent)
      if agent.protocol not in self._formats:
        fmt = make_format(agent.protocol, self.tokenizer, self.env.system_prompt)
        self._formats[agent.protocol] = fmt
      if agent not in self._episodes:
        self._episodes[agent] = SandboxEpisodes(
          self.gen,
          self._formats[agent.protocol],
          agent,
          backend=self.env.backend,
          image=self.env.image,
          verifier_mode=self.env.verifier_mode,
        )
      return self._episodes[agent]

  def _external(self, agent: AgentConfig):
    """agent.kind=external: the harness samples through a gateway (127.0.0.1, an ephemeral
    port) over this replica's generator; one gateway serves every external agent config."""
    from envs.gateway import BackgroundServer, Gateway, make_app
    from envs.harness import ExternalEpisodes, resolve_harness

    if self._server is None:
      self._gateway = Gateway(self.gen, self.tokenizer, model_name="agentrl")
      self._server = BackgroundServer(make_app(self._gateway))
    return ExternalEpisodes(
      self._gateway,
      self._server,
      resolve_harness(agent.harness),
      backend=self.env.backend,
      image=self.env.image,
      verifier_mode=self.env.verifier_mode,
      harness_timeout_s=agent.episode_timeout_s,
      exec_timeout_s=agent.exec_timeout_s,
    )

  def close(self) -> None:
    if self._server is not None:
      self._server.close()
    self.gen.close()


def load_tokenizer(spec: str, workdir=None, corpus=None):
  """ "byte", "bpe:<vocab size>" (trained on `corpus()` once, kept in WORKDIR/tokenizer) or a
  Hugging Face checkpoint folder."""
  if spec == "byte":
    from models.io.tokenizer import ByteTokenizer

    return ByteTokenizer()
  from models.io import hf

  if spec.startswith("bpe:"):
    from models.io.tokenizer import save_tokenizer, train_bpe

    try:
      vocab = int(spec.split(":", 1)[1])
    except ValueError:
      raise ValueError(f"tokenizer: {spec!r} must be 'bpe:<vocab size>', e.g. 'bpe:512'") from None
    if workdir is None or corpus is None:
      raise ValueError(f"tokenizer {spec!r} needs a workdir and a corpus (experiment.run)")
    path = pathlib.Path(workdir) / "tokenizer"
    if not (path / "tokenizer.json").is_file():  # trained once; a resumed run reads it back
      save_tokenizer(train_bpe(corpus(), vocab), path)
    return hf.load_tokenizer(path)
  return hf.load_tokenizer(spec)


def tokenizer_corpus(tasks, n: int, system_prompt: str) -> list[str]:
  """Texts a from-scratch tokenizer is trained on: instructions, reference actions, formats."""
  pick = getattr(tasks, "corpus_tasks", tasks.demo_tasks)
  texts = [system_prompt, format_tool_call("finish")]
  texts += [format_exec_observation(c, "out", "err") for c in (0, 1, 2, 124)]
  for t in pick(n):
    texts.append(t.instruction)
    acts = dict(t.metadata).get("demo_actions") or [
      format_tool_call("shell", command=t.solution_script.strip())
    ]
    texts.extend(acts)
  return texts


def policy_from_checkpoint(
  checkpoint: str, tokenizer: str = "auto", agent_cfg=None, concurrency: int = 1,
  system_prompt: str | None = None, engine: EngineConfig | None = None, record: int = 0,
):  # fmt: skip
  """A PolicyAgent over a checkpoint, and a function that shuts it down.

  checkpoint: an HF folder, a training run's workdir (its latest checkpoint) or one of its
  orbax step directories (rl.runtime.export.resolve_checkpoint).
  tokenizer: `auto` (the checkpoint's tokenizer.json; the byte tokenizer if it has none),
  `byte` (models.io.tokenizer.ByteTokenizer) or a folder holding tokenizer.json.
  system_prompt: None for the protocol's own (markdown_bash_v<N> picks a version's file).
  engine: its precision tier (dtype, weight_dtype, kv_dtype); slots and length come from here.
  record: keep the first `record` episodes' segments and the fp32 params on the agent
  (`agent.segments`, `agent.model`) for rl.runtime.mismatch.
  """
  from envs.eval import PolicyAgent
  from models.io import hf
  from models.io.tokenizer import ByteTokenizer
  from rl.runtime.export import resolve_checkpoint

  agent_cfg = agent_cfg or AgentConfig(greedy=True)
  checkpoint = resolve_checkpoint(checkpoint)
  model_cfg, params = hf.load(checkpoint)
  if tokenizer == "auto" and not (pathlib.Path(checkpoint) / "tokenizer.json").is_file():
    tokenizer = "byte"
  tok = (
    ByteTokenizer()
    if tokenizer == "byte"
    else hf.load_tokenizer(checkpoint if tokenizer == "auto" else tokenizer)
  )
  if tok.vocab_size > model_cfg.vocab_size:
    raise ValueError(
      f"tokenizer has {tok.vocab_size} ids but the checkpoint {checkpoint} only {model_cfg.vocab_size}"
    )
  max_len = min(model_cfg.max_seq_len, agent_cfg.max_context_tokens)
  agent_cfg = dataclasses.replace(agent_cfg, max_context_tokens=max_len)
  engine = dataclasses.replace(engine or EngineConfig(), slots=concurrency, max_seq_len=max_len)
  gen = generator(model_cfg, params, tok, engine)
  agent = PolicyAgent(gen, tok, agent_cfg, system_prompt, record=record)
  agent.model = (model_cfg, params) if record else None
  return agent, gen.close
