"""Host-loop failure handling with real components: the engine keeps its weights through a
donated update (async rollouts decode during it), and a dead engine stops the run with its
error instead of masking groups forever."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs import procedural
from envs.agents import agent, tool_format
from envs.episodes import SandboxEpisodes
from models import transformer
from models.config import tiny
from models.inference.engine import Engine
from models.inference.generator import GenerationRequest, Generator
from models.io.tokenizer import ByteTokenizer
from models.sampling import SamplingParams
from parallel.mesh import single_device_mesh
from rl.config import LossConfig, OptimConfig, RolloutConfig, TrainConfig
from rl.packing import pack
from rl.runtime.buffer import BufferClosed, StalenessBuffer
from rl.runtime.rollout import RolloutManager
from rl.runtime.trainer import engine_params
from rl.runtime.trajectory_store import TrajectoryStore
from rl.train_state import create_train_state
from rl.train_step import make_train_step

CFG = tiny("qwen3", vocab_size=260, d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64)


def test_engine_weights_survive_the_donated_update():
  # One device: the engine's device_put of the trainer's params is a no-op (an alias), and the
  # next donated train step would delete the weights the engine is decoding with.
  mesh = single_device_mesh()
  cfg = TrainConfig(loss=LossConfig(kl="none"), optim=OptimConfig(lr=1e-2, warmup_steps=0))
  state, shardings = create_train_state(CFG, cfg, mesh, jax.random.key(0))
  engine = Engine(CFG, jax.device_get(state.params), max_concurrent_decodes=2, max_seq_len=64)
  rng = np.random.default_rng(0)
  seqs = [
    dict(
      tokens=rng.integers(1, 200, 12),
      loss_mask=np.r_[np.zeros(4), np.ones(8)].astype(np.float32),
      behaviour_logprobs=np.full(12, -1.0, np.float32),
      advantage=1.0,
    )
  ]
  batch = pack(seqs, 16, max_segments=1, row_multiple=1)[0]
  step = make_train_step(CFG, cfg, mesh, shardings, batch)
  state, _ = step(state, batch)
  engine.load_params(engine_params(state.params), version=1)  # the loop's weight sync
  # (a host view, e.g. device_get, would pin the buffers and silently stop the donation)
  synced = jax.tree.map(jnp.copy, state.params)
  state, _ = step(state, batch)  # donates the state of update 1
  assert not any(x.is_deleted() for x in jax.tree.leaves(engine.params))
  jax.tree.map(np.testing.assert_array_equal, *jax.device_get((engine.params, synced)))
  with Generator(engine) as gen:  # and it still decodes
    req = GenerationRequest([1, 2, 3], max_new_tokens=4, sampling=SamplingParams(greedy=True))
    res = gen.generate([req])[0]
  assert len(res.tokens) == 4 and res.finish_reason == "length"


def test_a_dead_engine_stops_the_run_with_its_error(tmp_path):
  tok = ByteTokenizer()
  gen = Generator(Engine(CFG, _params(), max_concurrent_decodes=2, max_seq_len=128), tokenizer=tok)
  gen.close()  # as after an engine crash: every generation now fails
  acfg = agent.AgentConfig(max_turns=1, max_new_tokens=8, max_context_tokens=128)
  episodes = SandboxEpisodes(gen, tool_format.ChatFormat(tok, ""), acfg)
  task = procedural.generate("echo_word", 0)

  class OneTask:
    def task_for(self, gid):
      return task

    def get(self, task_id):
      return task

    def state_dict(self):
      return {}

  buf = StalenessBuffer(batch_size=1)
  events = []
  m = RolloutManager(
    RolloutConfig(group_size=1, max_infra_retries=1, max_concurrency=2, max_masked_in_a_row=3),
    run_episode=episodes,
    tasks=OneTask(),
    buffer=buf,
    store=TrajectoryStore(tmp_path),
    on_event=lambda k, **f: events.append((k, f)),
  )
  m.start()
  try:
    with pytest.raises(BufferClosed):  # the producer closed it
      buf.get_batch(timeout=120)
    with pytest.raises(RuntimeError, match="rollout producer failed") as err:
      m.check()
  finally:
    m.stop()
  assert "3 groups in a row" in str(err.value.__cause__)
  assert "Generator is closed" in str(err.value.__cause__)
  assert sum(k == "group_masked" for k, _ in events) >= 3


def _params():
  return jax.device_get(transformer.init(CFG, jax.random.key(0)))
