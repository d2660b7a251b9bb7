r"""Serve a checkpoint: an OpenAI-compatible HTTP API (default) or JetStream's gRPC server.

  python -m launch.serve --api=openai --checkpoint=DIR [--port=8000] [--max_concurrent_decodes=8]
  pip install -e .[jetstream]
  python -m launch.serve --api=jetstream --checkpoint=DIR [--port=9000]

`--api=openai` (envs.gateway: FastAPI + uvicorn) serves /v1/models, /v1/chat/completions and
/v1/completions with continuous batching and prefix reuse, plus /episodes/<id>/v1 for clients
whose calls an RL run records. It binds 127.0.0.1 unless --host says otherwise; then give
--api_key (clients send `Authorization: Bearer KEY`, the openai client's `api_key=`). Request
bodies over --max_request_bytes get 413, JSON nested over 32 levels 400 (envs.gateway.server).

DIR is a local Hugging Face folder (config.json, safetensors, optionally tokenizer.json; a
checkpoint without tokenizer.json and a vocabulary of at least 260 ids uses the byte
tokenizer), a named checkpoint, a training workdir or one of its checkpoints/N (exported once,
rl.runtime.export.resolve_checkpoint); a workdir or its export also gives the defaults of
--max_tokens (the run's agent.max_new_tokens), --max_seq_len, --page_size and the engine's
precision tier, unless a flag overrides one (stderr says which). The server binds 127.0.0.1 only: google-jetstream 0.2.2 hard-codes "[::]", so
`start_server` sets its module-level `_HOST` before building the server. Decoding is greedy.
Importing jetstream pulls TensorFlow (slow import); its orchestrator also sets the root
logger to DEBUG with a stdout handler at import, which `start_server` undoes.
"""

from __future__ import annotations

import logging as logging_std
import pathlib

from absl import flags, logging

FLAGS = flags.FLAGS


def define_flags() -> None:
  flags.DEFINE_enum("api", "openai", ["openai", "jetstream"], "Which server to run.")
  flags.DEFINE_string(
    "checkpoint", None, "HF folder, .gguf, smollm2-135m-instruct, training workdir or its step dir"
  )
  flags.DEFINE_integer("port", 0, "Port (0: 8000 for openai, 9000 for jetstream).")
  flags.DEFINE_string("host", "127.0.0.1", "Bind address of the OpenAI server.")
  flags.DEFINE_string("model_name", "", "Model id the OpenAI API serves (default: folder name).")
  flags.DEFINE_integer("max_tokens", 256, "Default max_tokens of the OpenAI API.")
  flags.DEFINE_integer("max_concurrent_decodes", 8, "Decode slots.")
  flags.DEFINE_integer("max_seq_len", 0, "Tokens per slot (0 = the model's max_seq_len).")
  flags.DEFINE_integer("page_size", 16, "KV page size.")
  flags.DEFINE_enum("tokenizer", "auto", ["auto", "hf", "byte"], "Tokenizer source.")
  flags.DEFINE_string(
    "api_key", "", "OpenAI server: require 'Authorization: Bearer KEY' (for a --host beyond "
    "loopback); $AGENTRL_API_KEY when empty."
  )  # fmt: skip
  flags.DEFINE_integer("max_request_bytes", 4 << 20, "OpenAI server: request body cap (413).")
  flags.mark_flags_as_required(["checkpoint"])


def _tokenizer(path: pathlib.Path, kind: str, vocab_size: int):
  from models.io import hf
  from models.io.tokenizer import ByteTokenizer

  if kind == "hf" or (kind == "auto" and (path / "tokenizer.json").is_file()):
    return hf.load_tokenizer(path)
  tok = ByteTokenizer()
  if vocab_size < tok.vocab_size:
    raise ValueError(
      f"{path}: no tokenizer.json and vocab {vocab_size} < byte vocab {tok.vocab_size}"
    )
  return tok


def start_server(checkpoint, *, port: int, max_concurrent_decodes=8, max_seq_len=0, page_size=16,
                 tokenizer="auto", threads=None):  # fmt: skip
  """Loads the checkpoint and starts JetStream's gRPC server on 127.0.0.1:port; returns it."""
  import grpc

  from models.inference.jetstream_adapter import import_jetstream, make_engine
  from models.io import hf
  from rl.config import EngineConfig
  from rl.runtime import export, replica

  path = pathlib.Path(export.resolve_checkpoint(checkpoint))  # a name, an HF folder, a workdir
  cfg, params = hf.load(path)
  tok = _tokenizer(path, tokenizer, cfg.vocab_size)
  sizes = EngineConfig(slots=max_concurrent_decodes, max_seq_len=max_seq_len, page_size=page_size)
  engine = replica.make_engine(cfg, params, sizes)
  js_engine = make_engine(engine, tok)
  import_jetstream()
  root = logging_std.getLogger()
  handlers, level = list(root.handlers), root.level
  from jetstream.core import orchestrator, server_lib

  # Its orchestrator adds a DEBUG stdout handler to the root logger at import: undo that.
  root.handlers[:], root.level = handlers, level

  server_lib._HOST = "127.0.0.1"  # loopback only; 0.2.2 has no parameter for the host
  driver = orchestrator.Driver(
    prefill_engines=[js_engine], generate_engines=[js_engine],
    prefill_params=[engine.params], generate_params=[engine.params], interleaved_mode=True,
  )  # fmt: skip
  threads = threads or max(driver.get_total_concurrent_requests(), 8)
  server = server_lib.JetStreamServer(driver, threads, port, grpc.insecure_server_credentials())
  server.start()
  logging.info("JetStream server for %s on 127.0.0.1:%d", path, port)
  return server


def build_gateway(checkpoint, *, max_concurrent_decodes=8, max_seq_len=0, page_size=16,
                  tokenizer="auto", model_name="", max_tokens=256, engine=None):  # fmt: skip
  """(Gateway, Generator) for a checkpoint: one engine thread shared by every client.
  engine: a dict of EngineConfig's precision fields (dtype, weight_dtype, kv_dtype)."""
  from envs.gateway import Gateway
  from models.inference.generator import Generator
  from models.io import hf
  from rl.config import EngineConfig
  from rl.runtime import export, replica

  path = pathlib.Path(export.resolve_checkpoint(checkpoint))  # a name, an HF folder, a workdir
  cfg, params = hf.load(path)
  tok = _tokenizer(path, tokenizer, cfg.vocab_size)
  sizes = EngineConfig(slots=max_concurrent_decodes, max_seq_len=max_seq_len, page_size=page_size,
                       **(engine or {}))  # fmt: skip
  gen = Generator(replica.make_engine(cfg, params, sizes), tokenizer=tok, prefix_caching=True)
  gw = Gateway(gen, tok, model_name=model_name or path.name, max_tokens=max_tokens)
  return gw, gen


def run_defaults(checkpoint) -> dict:
  """max_tokens, max_seq_len, page_size and the engine tier: a flag given wins, then the run's
  settings (a workdir or its export, rl.runtime.run_settings), then the flag's default; says
  which on stderr."""
  import sys

  from rl.runtime import export, run_settings

  stored = run_settings.read(export.resolve_checkpoint(checkpoint))
  agent, engine = (stored or {}).get("agent") or {}, (stored or {}).get("engine") or {}
  run = {"max_tokens": agent.get("max_new_tokens"), "max_seq_len": engine.get("max_seq_len"),
         "page_size": engine.get("page_size")}  # fmt: skip
  out, used = {}, []
  for name, value in run.items():
    out[name] = FLAGS[name].value if FLAGS[name].present or value is None else value
    if not FLAGS[name].present and value is not None:
      used.append(f"{name}={value}")
  out["engine"] = {k: engine[k] for k in ("dtype", "weight_dtype", "kv_dtype") if k in engine}
  used += [f"engine {k}={v!r}" for k, v in out["engine"].items()]
  if stored is not None:
    print(f"settings of the run ({stored['source']}): {', '.join(used)}", file=sys.stderr)
  return out


def main(argv) -> None:
  del argv
  if FLAGS.api == "openai":
    import uvicorn

    from envs.gateway import make_app

    gw, gen = build_gateway(
      FLAGS.checkpoint, max_concurrent_decodes=FLAGS.max_concurrent_decodes,
      tokenizer=FLAGS.tokenizer, model_name=FLAGS.model_name, **run_defaults(FLAGS.checkpoint),
    )  # fmt: skip
    logging.info(
      "OpenAI API for %s on http://%s:%d/v1", gw.model_name, FLAGS.host, FLAGS.port or 8000
    )
    import os
    import sys

    key = FLAGS.api_key or os.environ.get("AGENTRL_API_KEY", "")
    if not key and FLAGS.host not in ("127.0.0.1", "localhost", "::1"):
      print(f"warning: --host={FLAGS.host} without --api_key: anyone who reaches it can use "
            "the model", file=sys.stderr)  # fmt: skip
    app = make_app(gw, max_body_bytes=FLAGS.max_request_bytes, api_key=key)
    try:
      uvicorn.run(app, host=FLAGS.host, port=FLAGS.port or 8000, log_level="info")
    finally:
      gen.close()
    return
  server = start_server(
    FLAGS.checkpoint, port=FLAGS.port or 9000, max_concurrent_decodes=FLAGS.max_concurrent_decodes,
    max_seq_len=FLAGS.max_seq_len, page_size=FLAGS.page_size, tokenizer=FLAGS.tokenizer,
  )  # fmt: skip
  server.wait_for_termination()


if __name__ == "__main__":
  from launch import cli

  define_flags()
  cli.run(main)
