"""Optional adapter: our Engine as a `jetstream.engine.engine_api.Engine` (google-jetstream 0.2.2).

Only `launch/serve.py` imports this module; the core path never imports jetstream.
Install with `pip install -e .[jetstream]`. Two facts about that package, handled here:
  * it calls `jax.tree_map`, which current JAX removed: `import_jetstream()` sets
    `jax.tree_map = jax.tree.map` (same semantics) before importing it, and says so in a log;
  * importing it pulls TensorFlow (via seqio / tensorflow-text), which takes several seconds
    and a few hundred MB; that is why it is optional.

Semantics: greedy decoding (JetStream's API has no per-request sampling); each slot owns a
fixed run of pages (JetStream never tells an engine that a request ended); `generate` streams
the token fed at this step, so the prefill's first token is the first streamed one. JetStream
prepends `bos_id` to a first-turn prompt; for a tokenizer without BOS the adapter reports the
sentinel -1 and its `prefill` drops it, so the model sees the prompt unchanged.

Legend: S slots, M pages per slot.
"""

from __future__ import annotations

import dataclasses
import functools
import logging

import jax
import jax.numpy as jnp
import numpy as np

from models.inference import engine as eng_lib

NO_BOS = -1


def import_jetstream():
  """Imports jetstream's engine_api after the one shim 0.2.2 needs on current JAX."""
  if not hasattr(jax, "tree_map"):
    logging.info("jetstream 0.2.2 calls jax.tree_map (removed from JAX): aliasing jax.tree.map")
    jax.tree_map = jax.tree.map
  from jetstream.engine import engine_api, tokenizer_api

  return engine_api, tokenizer_api


@dataclasses.dataclass(frozen=True)
class AdapterState:
  inner: eng_lib.DecodeState
  prompt_len_S: jax.Array  # tokens in the cache when the slot's request was inserted


jax.tree_util.register_dataclass(
  AdapterState, data_fields=["inner", "prompt_len_S"], meta_fields=[]
)


def _generate(params, state: AdapterState, *, cfg):
  fed_S = state.inner.tokens_S
  count_S = state.inner.lengths_S - state.prompt_len_S + 1  # generated tokens incl. fed one
  inner, _ = eng_lib.decode_fn(params, state.inner, cfg=cfg)
  data_S3 = jnp.stack([fed_S, jnp.ones_like(fed_S), count_S], axis=1)
  return AdapterState(inner, state.prompt_len_S), data_S3


def _insert(prefix, state: AdapterState, slot, page_row):
  inner = eng_lib.insert_fn(prefix, state.inner, slot[None], page_row[None])
  return AdapterState(inner, state.prompt_len_S.at[slot].set(prefix.length_B[0]))


def make_engine(engine: eng_lib.Engine, tokenizer):
  """Wraps an Engine (and a models.io.tokenizer Tokenizer) as a JetStream Engine instance."""
  engine_api, tokenizer_api = import_jetstream()

  class _Tokenizer(tokenizer_api.Tokenizer):
    def __init__(self, tok):
      self._tok = tok

    def encode(self, s, **kwargs):
      from jetstream.engine import token_utils

      return token_utils.pad_tokens(
        np.asarray(self._tok.encode(s)), self.bos_id, self.pad_id,
        is_bos=kwargs.get("is_bos", True), max_prefill_length=kwargs.get("max_prefill_length"),
        jax_padding=kwargs.get("jax_padding", True),
      )  # fmt: skip

    def decode(self, token_ids, **kwargs):
      return self._tok.decode(list(token_ids))

    @property
    def pad_id(self):
      return int(self._tok.pad_id)

    @property
    def eos_id(self):
      return int(self._tok.eos_id)

    @property
    def bos_id(self):
      return NO_BOS if self._tok.bos_id is None else int(self._tok.bos_id)

    @property
    def stop_tokens(self):
      return set(getattr(self._tok, "stop_ids", (self._tok.eos_id,)))

  class JetStreamEngine(engine_api.Engine):
    """Greedy, fixed pages per slot; see the module docstring."""

    def __init__(self):
      self._e = engine
      M = engine.pages_per_slot
      self._rows = 1 + np.arange(engine.max_concurrent_decodes * M).reshape(-1, M)
      if self._rows.max() >= engine.num_pages:
        raise ValueError(f"JetStream adapter needs num_pages >= {self._rows.max() + 1}")
      self._gen = jax.jit(functools.partial(_generate, cfg=engine.cfg), donate_argnums=(1,))
      self._ins = jax.jit(_insert, donate_argnums=(1,))

    def prefill(self, *, params, existing_prefix=None, padded_tokens, true_length):
      if existing_prefix is not None:
        raise NotImplementedError("JetStream adapter: existing_prefix is not supported")
      toks = np.asarray(padded_tokens)
      if toks[0] == NO_BOS:  # JetStream's BOS for a tokenizer that has none
        toks, true_length = np.concatenate([toks[1:], toks[:1] * 0]), true_length - 1
      return self._e.prefill(params=params, padded_tokens=toks, true_length=int(true_length))

    def generate(self, params, decode_state):
      state, data = self._gen(params, decode_state)
      return state, engine_api.ResultTokens(data, (0, 1), (1, 2), (2, 3), 1)

    def insert(self, prefix, decode_state, slot):
      return self._ins(prefix, decode_state, jnp.int32(slot), eng_lib.to_device(self._rows[slot]))

    def load_params(self, *args, **kwargs):
      return self._e.params

    def get_prefix_destination_sharding(self):
      return jax.sharding.SingleDeviceSharding(jax.devices()[0])

    def get_tokenizer(self):
      from jetstream.engine import tokenizer_pb2

      return tokenizer_pb2.TokenizerParameters(path="agentrl")

    def build_tokenizer(self, metadata):
      return _Tokenizer(tokenizer)

    def init_decode_state(self, *args, **kwargs):
      S = self._e.max_concurrent_decodes
      return AdapterState(self._e.init_decode_state(), jnp.zeros((S,), jnp.int32))

    @property
    def max_concurrent_decodes(self):
      return self._e.max_concurrent_decodes

    @property
    def samples_per_slot(self):
      return 1

    @property
    def max_prefill_length(self):
      return self._e.max_seq_len // 2

    @property
    def mesh(self):
      return None

    @property
    def colocated_cpus(self):
      return None

  return JetStreamEngine()
