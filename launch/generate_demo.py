"""Load a checkpoint folder and greedily generate a few tokens (the project's smoke demo).

Without --checkpoint it builds a tiny random Qwen3-shaped model, writes it as a Hugging
Face folder with `models.io.hf.save`, loads it back with `models.io.hf.load` (checking the round
trip is exact) and generates from it with the byte tokenizer. With --checkpoint it loads
a local HF folder (config.json, safetensors, tokenizer.json) instead.

  python -m launch.generate_demo
  python -m launch.generate_demo --checkpoint=/path/to/Qwen3-0.6B --chat --prompt="Hi!"

Generation recomputes the full (padded) sequence each step: simple and obviously right;
the KV-cache engine lives in models/inference/engine.py.
"""

from __future__ import annotations

import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags, logging

from models import config, transformer
from models.io import hf
from models.io.tokenizer import ByteTokenizer
from rl.runtime.export import resolve_checkpoint

flags.DEFINE_string(
  "checkpoint",
  "",
  "HF folder, .gguf, smollm2-135m-instruct, training workdir or orbax step dir; empty = tiny",
)
flags.DEFINE_string("workdir", "", "where the tiny checkpoint is written (default: a temp dir)")
flags.DEFINE_string("prompt", "Hello, agent!", "prompt text")
flags.DEFINE_bool("chat", False, "wrap the prompt with the tokenizer's chat template")
flags.DEFINE_integer("max_new_tokens", 16, "tokens to generate")
flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "compute dtype")
flags.DEFINE_integer("seed", 0, "seed of the tiny random model")
FLAGS = flags.FLAGS


def build_tiny_checkpoint(path: str, seed: int) -> None:
  """Writes a tiny random model (byte vocabulary) as a HF checkpoint folder."""
  tok = ByteTokenizer()
  cfg = config.tiny("qwen3", vocab_size=tok.vocab_size, n_layers=2, max_seq_len=512)
  params = transformer.init(cfg, jax.random.PRNGKey(seed))
  hf.save(path, cfg, params)
  _, loaded = hf.load(path)
  same = jax.tree.all(jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)), params, loaded))
  logging.info(
    "wrote %s (%d params); save -> load round trip exact: %s", path, config.num_params(cfg), same
  )
  if not same:
    raise RuntimeError("save -> load round trip changed the weights")


def greedy_generate(params, cfg, prompt_ids, max_new_tokens, stop_ids=()):
  """Greedy decoding by full recomputation over a fixed-size buffer (one compile)."""
  total = len(prompt_ids) + max_new_tokens
  buf = np.zeros((1, total), np.int32)
  buf[0, : len(prompt_ids)] = prompt_ids

  @jax.jit
  def next_token(params, buf, t):
    logits = transformer.apply(params, buf, cfg)  # causal: padding after t is never seen
    return jnp.argmax(logits[0, t - 1])

  out = []
  for t in range(len(prompt_ids), total):
    tok = int(next_token(params, buf, t))
    out.append(tok)
    buf[0, t] = tok
    if tok in stop_ids:
      break
  return out


def main(argv):
  del argv
  path = FLAGS.checkpoint
  if not path:
    path = FLAGS.workdir or tempfile.mkdtemp(prefix="agentrl_tiny_ckpt_")
    build_tiny_checkpoint(path, FLAGS.seed)
  path = resolve_checkpoint(path)  # a training run's workdir or orbax step: exported once
  cfg, params = hf.load(path, dtype=FLAGS.dtype)
  try:
    tok = hf.load_tokenizer(path)
  except hf.CheckpointError:
    logging.info("no tokenizer.json in %s: using the byte tokenizer", path)
    tok = ByteTokenizer()
  text = FLAGS.prompt
  if FLAGS.chat:
    text = tok.apply_chat_template([{"role": "user", "content": text}])
  ids = tok.encode(text)
  start = time.perf_counter()
  new = greedy_generate(params, cfg, ids, FLAGS.max_new_tokens, getattr(tok, "stop_ids", ()))
  sec = time.perf_counter() - start
  print(f"checkpoint: {path} ({cfg.arch}, {config.num_params(cfg):,} params)")
  print(f"prompt ({len(ids)} tokens): {text!r}")
  print(f"generated ids: {new}")
  print(f"generated text: {tok.decode(new)!r}")
  print(f"{len(new)} tokens in {sec:.1f} s (greedy, full recompute, includes compile)")


if __name__ == "__main__":
  from launch import cli

  cli.run(main)
