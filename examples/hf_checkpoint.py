"""The README's Hugging Face snippet, runnable: save a model as an HF folder, load it, run it.

  python examples/hf_checkpoint.py [/path/to/Qwen3-0.6B]

With no argument a tiny random Qwen3 is saved first (no download); with a checkpoint folder
(config.json, safetensors, tokenizer.json) that one is loaded and its tokenizer used.
"""

import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

from models import transformer
from models.config import tiny
from models.io import hf
from models.io.tokenizer import ByteTokenizer


def main(path: str | None = None) -> np.ndarray:
  with tempfile.TemporaryDirectory() as tmp:
    if path is None:  # a stand-in checkpoint: a tiny random model in the HF layout
      path = f"{tmp}/tiny"
      cfg0 = tiny("qwen3", vocab_size=260)
      hf.save(path, cfg0, jax.device_get(transformer.init(cfg0, jax.random.key(0))))
      tok = ByteTokenizer()
    else:
      tok = hf.load_tokenizer(path)  # tokenizer.json + chat template
    cfg, params = hf.load(path, dtype="float32")  # config.json + (sharded) safetensors
    ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": "hi"}]))
    logits_BTV = transformer.apply(params, jnp.asarray([ids]), cfg)
    hf.save(f"{tmp}/export", cfg, params, max_shard_bytes=2**20)  # safetensors + config.json
    cfg2, params2 = hf.load(f"{tmp}/export")
    again_BTV = transformer.apply(params2, jnp.asarray([ids]), cfg2)
  np.testing.assert_array_equal(np.asarray(logits_BTV), np.asarray(again_BTV))
  print(f"{len(ids)} prompt tokens -> logits {logits_BTV.shape}; re-saved copy gives the same")
  return np.asarray(logits_BTV)


if __name__ == "__main__":
  main(sys.argv[1] if len(sys.argv) > 1 else None)
