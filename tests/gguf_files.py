"""Tiny GGUF files written with the `gguf` package's writer (shared by the GGUF tests).

A file holds a random model of our config in llama.cpp's layout (q/k rows permuted for
Llama, as its converter does) and a small byte-level BPE vocabulary. Types the `gguf`
package can quantise (F16, BF16, Q8_0, Q4_0, Q4_1) are quantised from the random weights;
for Q4_K and Q6_K, which it cannot, the blocks themselves are random with small scales.
"""

import numpy as np

from models.io import gguf as mgguf
from models.io.hf_tensors import tensor_specs, to_hf

# Bytes per 256-weight block and where each block's f16 scales sit (offset, low, high).
_RANDOM_BLOCKS = {"Q4_K": (144, [(0, 2e-4, 4e-4), (2, 2e-4, 4e-4)]), "Q6_K": (210, [(208, 1e-4, 2e-4)])}  # fmt: skip


def byte_chars():
  return mgguf._byte_chars()  # noqa: SLF001 (the test builds a vocabulary with the same table)


def tiny_vocab():
  """(tokens, token types, merges) of a byte-level BPE with a few merges and 3 specials."""
  chars = mgguf.byte_chars()
  tokens = [chars[b] for b in range(256)]
  merges = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a"]
  tokens += ["Ġt", "he", "Ġthe", "in", "Ġa"]
  specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
  types = [1] * len(tokens) + [3] * len(specials)
  return tokens + specials, types, merges


def permute_rows(w, n_heads):
  """llama.cpp's q/k row order: within each head, the two rotary halves interleaved."""
  rows = w.shape[0]
  return w.reshape(n_heads, 2, rows // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _encode(arr, qtype: str, rng):
  import gguf

  t = gguf.GGMLQuantizationType[qtype]
  if arr.ndim == 1 or qtype == "F32":
    return arr.astype(np.float32), None
  if qtype == "F16":
    return arr.astype(np.float16), None
  if qtype in _RANDOM_BLOCKS:
    size, scales = _RANDOM_BLOCKS[qtype]
    blocks = rng.randint(0, 256, (arr.shape[0], arr.shape[1] // 256, size)).astype(np.uint8)
    for off, lo, hi in scales:
      d = rng.uniform(lo, hi, blocks.shape[:2]).astype(np.float16)
      blocks[..., off : off + 2] = d.view(np.uint8).reshape(*d.shape, 2)
    return blocks.reshape(arr.shape[0], -1), t
  return gguf.quants.quantize(arr.astype(np.float32), t), t


def hf_tensors(cfg, params):
  """HF name -> float32 array [out, in] of our params."""
  host = {k: np.asarray(v) for k, v in params.items() if k != "layers"}
  host.update({("layers", k): np.asarray(v) for k, v in params["layers"].items()})
  out = {}
  for leaf, index, name, hf_shape, transpose in tensor_specs(cfg):
    val = host[leaf if len(leaf) == 2 else leaf[0]]
    out[name] = to_hf(val[index] if index else val, hf_shape, transpose).astype(np.float32)
  return out


def write(path, cfg, params, qtype: str = "F32", *, arch: str | None = None, seed: int = 0,
          drop: tuple[str, ...] = (), chat_template: str | None = None,
          tokenizer_model: str = "gpt2"):  # fmt: skip
  """Writes `params` of `cfg` as a GGUF file; returns the path."""
  import gguf

  arch = arch or cfg.arch
  rng = np.random.RandomState(seed)
  w = gguf.GGUFWriter(str(path), arch)
  w.add_block_count(cfg.n_layers)
  w.add_context_length(cfg.max_seq_len)
  w.add_embedding_length(cfg.d_model)
  w.add_feed_forward_length(cfg.d_ff)
  w.add_head_count(cfg.n_heads)
  w.add_head_count_kv(cfg.n_kv_heads)
  w.add_key_length(cfg.head_dim)
  w.add_value_length(cfg.head_dim)
  w.add_rope_dimension_count(cfg.head_dim)
  w.add_rope_freq_base(cfg.rope_theta)
  w.add_layer_norm_rms_eps(cfg.norm_eps)
  w.add_vocab_size(cfg.vocab_size)
  tokens, types, merges = tiny_vocab()
  w.add_tokenizer_model(tokenizer_model)
  w.add_tokenizer_pre("default")
  w.add_token_list(tokens)
  w.add_token_types(types)
  w.add_token_merges(merges)
  w.add_bos_token_id(tokens.index("<|im_start|>"))
  w.add_eos_token_id(tokens.index("<|im_end|>"))
  w.add_pad_token_id(tokens.index("<|endoftext|>"))
  if chat_template:
    w.add_chat_template(chat_template)
  for hf_name, arr in hf_tensors(cfg, params).items():
    name = mgguf.gguf_name(hf_name)
    if name in drop:
      continue
    if cfg.arch == "llama" and ".attn_q." in name:
      arr = permute_rows(arr, cfg.n_heads)
    elif cfg.arch == "llama" and ".attn_k." in name:
      arr = permute_rows(arr, cfg.n_kv_heads)
    data, raw = _encode(arr, qtype, rng)
    w.add_tensor(name, data, raw_dtype=raw)
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  return path
