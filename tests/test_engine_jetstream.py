"""JetStream: serve a tiny checkpoint on loopback and decode through JetStream's gRPC API."""

import importlib.util
import socket

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
  importlib.util.find_spec("jetstream") is None,
  reason="google-jetstream is not installed (optional extra: pip install -e .[jetstream])",
)


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_serve_checkpoint_and_decode_over_grpc(tmp_path):
  import grpc

  from launch.serve import start_server
  from models import config
  from models import transformer as tfm
  from models.io import hf

  cfg = config.tiny("qwen3", vocab_size=260, max_seq_len=64)
  params = tfm.init(cfg, jax.random.PRNGKey(0))
  params = dict(
    params, layers=jax.tree.map(lambda a: a * 10.0 if a.ndim >= 3 else a, params["layers"])
  )
  hf.save(tmp_path, cfg, params)
  port = _free_port()
  server = start_server(tmp_path, port=port, max_concurrent_decodes=2, page_size=8)
  try:
    from jetstream.core.proto import jetstream_pb2, jetstream_pb2_grpc

    prompts = [[72, 101, 108, 108, 111], [1, 2, 3]]
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
      stub = jetstream_pb2_grpc.OrchestratorStub(channel)
      got = []
      for prompt in prompts:
        req = jetstream_pb2.DecodeRequest(
          token_content=jetstream_pb2.DecodeRequest.TokenContent(token_ids=prompt), max_tokens=6
        )
        toks = []
        for resp in stub.Decode(req, timeout=300):
          for sample in resp.stream_content.samples:
            toks.extend(sample.token_ids)
        got.append(toks)
  finally:
    server.stop()
  fwd = jax.jit(lambda t: tfm.apply(params, t, cfg))
  for prompt, toks in zip(prompts, got, strict=True):
    seq = list(prompt)  # greedy reference by full recompute; the byte tokenizer has no BOS
    want = []
    while len(want) < 6:
      pad = np.zeros((1, 16), np.int32)
      pad[0, : len(seq)] = seq
      nxt = int(jnp.argmax(fwd(jnp.asarray(pad))[0, len(seq) - 1]))
      if nxt in (257, 259):  # stop ids of the byte tokenizer end the stream
        break
      want.append(nxt)
      seq.append(nxt)
    assert toks == want
    assert len(toks) > 0
