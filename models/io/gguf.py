"""GGUF files (llama.cpp's format) -> (ModelConfig, params) and an HFTokenizer.

Reads with the `gguf` package (the `[models]` extra): its reader for metadata and tensor
infos, its `quants.dequantize` for the blocks. Supported: Llama, Qwen2 and Qwen3 dense
models stored as F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K or Q6_K. llama.cpp's converter
permutes the q/k rows of Llama models (its rope rotates adjacent pairs, HF's rotates
halves); `load` undoes that, so the params are those of the HF checkpoint the file came from.
Every tensor's name, type, shape and byte range is checked before any data is read, so a
bad file raises `CheckpointError` naming the file, the tensor and the cause.

The tokenizer is rebuilt as a byte-level BPE `tokenizers.Tokenizer` from the file's
vocabulary, merges, token types (control tokens become special tokens), pre-tokenizer name,
special ids and chat template.
"""

from __future__ import annotations

import functools
import pathlib
import re

import ml_dtypes
import numpy as np

from models.config import ModelConfig, RopeScaling
from models.io.hf_config import CheckpointError
from models.io.hf_tensors import assemble, tensor_specs
from models.io.tokenizer import HFTokenizer

__all__ = ["SUPPORTED_TYPES", "config", "load", "load_tokenizer"]

ARCHS = ("llama", "qwen2", "qwen3")
SUPPORTED_TYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K")
_NP_PARAM = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}
_REQUIRED = object()

_FIXED_NAMES = {  # HF name -> GGUF name
  "model.embed_tokens.weight": "token_embd.weight",
  "model.norm.weight": "output_norm.weight",
  "lm_head.weight": "output.weight",
}
_LAYER_NAMES = {  # HF module under model.layers.{i}. -> GGUF name under blk.{i}.
  "input_layernorm": "attn_norm",
  "self_attn.q_proj": "attn_q",
  "self_attn.k_proj": "attn_k",
  "self_attn.v_proj": "attn_v",
  "self_attn.o_proj": "attn_output",
  "self_attn.q_norm": "attn_q_norm",
  "self_attn.k_norm": "attn_k_norm",
  "post_attention_layernorm": "ffn_norm",
  "mlp.gate_proj": "ffn_gate",
  "mlp.up_proj": "ffn_up",
  "mlp.down_proj": "ffn_down",
}
_LAYER_RE = re.compile(r"model\.layers\.(\d+)\.(.+)\.(weight|bias)")


def gguf_name(hf_name: str) -> str:
  """The GGUF tensor name llama.cpp's converter gives a HF tensor."""
  if hf_name in _FIXED_NAMES:
    return _FIXED_NAMES[hf_name]
  m = _LAYER_RE.fullmatch(hf_name)
  if not m or m.group(2) not in _LAYER_NAMES:
    raise CheckpointError(f"no GGUF name for tensor {hf_name}")
  return f"blk.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}.{m.group(3)}"


# ------------------------------------------------------------------ reading


def _lib():
  try:
    import gguf
  except ImportError as e:
    raise ImportError("reading GGUF files needs the gguf package: pip install -e .[models]") from e
  return gguf


@functools.cache
def _reader_class():
  gguf = _lib()

  class Reader(gguf.GGUFReader):
    # The library's reader fails on a bad tensor with a bare numpy/enum error that names
    # no tensor; checking the infos first turns each cause into a CheckpointError.
    def _build_tensors(self, start_offs, fields):
      for field in fields:
        _, name_data, _, dims, raw_type, offset = field.parts
        _check_tensor(self.data, bytes(name_data).decode(), dims, int(raw_type[0]),
                      int(start_offs + offset[0]))  # fmt: skip
      super()._build_tensors(start_offs, fields)

  return Reader


def _check_tensor(data, name: str, dims, raw_type: int, start: int) -> None:
  gguf = _lib()
  file = data.filename
  try:
    qtype = gguf.GGMLQuantizationType(raw_type)
  except ValueError:
    raise CheckpointError(f"{file}: tensor {name}: unknown GGML type id {raw_type}") from None
  if qtype.name not in SUPPORTED_TYPES:
    raise CheckpointError(
      f"{file}: tensor {name}: quantisation {qtype.name} is not supported "
      f"(supported: {', '.join(SUPPORTED_TYPES)})"
    )
  block, size = gguf.GGML_QUANT_SIZES[qtype]
  n = int(np.prod(dims))
  if n % block:
    raise CheckpointError(f"{file}: tensor {name}: {n} elements is not a multiple of {block}")
  end = start + n // block * size
  if end > len(data):
    raise CheckpointError(
      f"{file}: tensor {name}: file truncated (data ends at byte {end}, file has {len(data)})"
    )


def _open(path: pathlib.Path):
  if not path.is_file():
    raise CheckpointError(f"{path}: missing")
  st = path.stat()
  return _open_cached(path.resolve(), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _open_cached(path: pathlib.Path, size: int, mtime_ns: int):
  # Parsing a 50k-token vocabulary takes seconds; load + load_tokenizer share one reader.
  try:
    return _reader_class()(path)
  except CheckpointError:
    raise
  except Exception as e:  # the reader raises ValueError/IndexError/... on a corrupt header
    raise CheckpointError(f"{path}: not a readable GGUF file ({type(e).__name__}: {e})") from e


def _get(reader, path, key: str, default=_REQUIRED):
  field = reader.fields.get(key)
  if field is None:
    if default is _REQUIRED:
      raise CheckpointError(f"{path}: missing metadata {key}")
    return default
  return field.contents()


# ------------------------------------------------------------------ model


def config(reader, path, **overrides) -> ModelConfig:
  """The ModelConfig a GGUF file's metadata and tensor names describe."""
  arch = _get(reader, path, "general.architecture")
  if arch not in ARCHS:
    raise CheckpointError(
      f"{path}: unknown architecture general.architecture={arch!r} (supported: {', '.join(ARCHS)})"
    )
  names = {t.name for t in reader.tensors}
  if "token_embd.weight" not in names:
    raise CheckpointError(f"{path}: missing tensor token_embd.weight")

  def meta(key, default=_REQUIRED):
    return _get(reader, path, f"{arch}.{key}", default)

  heads, width = int(meta("attention.head_count")), int(meta("embedding_length"))
  head_dim = int(meta("attention.key_length", width // heads))
  if int(meta("rope.dimension_count", head_dim)) != head_dim:
    raise CheckpointError(f"{path}: {arch}.rope.dimension_count != head_dim (partial RoPE)")
  kind = meta("rope.scaling.type", "none")
  if kind not in ("none", "linear") or "rope_freqs.weight" in names:
    raise CheckpointError(f"{path}: rope scaling {kind!r} is not supported (none, linear)")
  rope = RopeScaling()
  if kind == "linear":
    rope = RopeScaling(kind="linear", factor=float(meta("rope.scaling.factor")))
  bias = arch == "qwen2" or "blk.0.attn_q.bias" in names
  vocab = meta("vocab_size", None) or int(_tensor_by_name(reader)["token_embd.weight"].shape[1])
  try:
    kw = dict(
      arch=arch,
      vocab_size=int(vocab),
      d_model=width,
      n_layers=int(meta("block_count")),
      n_heads=heads,
      n_kv_heads=int(meta("attention.head_count_kv", heads)),
      head_dim=head_dim,
      d_ff=int(meta("feed_forward_length")),
      max_seq_len=int(meta("context_length")),
      rope_theta=_f32(meta("rope.freq_base", 10000.0)),
      rope_scaling=rope,
      norm_eps=_f32(meta("attention.layer_norm_rms_epsilon")),
      qk_norm=arch == "qwen3",
      attn_bias=bias,
      attn_out_bias=arch == "llama" and bias,
      tie_embeddings="output.weight" not in names,
    )
    return ModelConfig(**{**kw, **overrides})
  except (TypeError, ValueError) as e:
    raise CheckpointError(f"{path}: {e}") from e


def _f32(value) -> float:
  """A float32 metadata value as the decimal it was written from (1e-05, not 9.99999974e-06)."""
  return float(str(np.float32(value)))


def _tensor_by_name(reader) -> dict:
  return {t.name: t for t in reader.tensors}


def _validate(cfg: ModelConfig, reader, path) -> dict:
  """HF name -> GGUF tensor, after checking that names and shapes are exactly the expected."""
  by_name, out = _tensor_by_name(reader), {}
  for _, _, hf_name, shape, _ in tensor_specs(cfg):
    name = gguf_name(hf_name)
    if name not in by_name:
      raise CheckpointError(f"{path}: missing tensor {name} (expected shape {tuple(shape)})")
    found = tuple(int(d) for d in reversed(by_name[name].shape.tolist()))
    if found != tuple(shape):
      raise CheckpointError(f"{path}: tensor {name}: expected shape {tuple(shape)}, found {found}")
    out[hf_name] = by_name[name]
  extra = sorted(set(by_name) - {t.name for t in out.values()})
  if extra:
    raise CheckpointError(f"{path}: unexpected tensors for {cfg.arch} (unsupported?): {extra[:5]}")
  return out


def unpermute_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
  """Undoes llama.cpp's q/k row order (pairs interleaved per head) back to HF's (halves)."""
  rows = w.shape[0]
  return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _dequantize(t, cfg: ModelConfig, path) -> np.ndarray:
  gguf = _lib()
  try:
    arr = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).astype(np.float32)
  except Exception as e:  # the library raises NotImplementedError/ValueError per type
    raise CheckpointError(f"{path}: tensor {t.name}: cannot dequantise: {e}") from e
  arr = arr.reshape(tuple(int(d) for d in reversed(t.shape.tolist())))
  if cfg.arch == "llama" and re.search(r"\.attn_[qk]\.", t.name):
    arr = unpermute_rows(arr, cfg.n_heads if ".attn_q." in t.name else cfg.n_kv_heads)
  return arr


def load(path, *, dtype: str = "float32", param_dtype: str = "float32", **overrides):
  """Loads a GGUF file into (ModelConfig, params), dequantised to `param_dtype`.

  Raises:
    CheckpointError: naming the file, tensor and cause (truncated, unknown type, shape, ...).
  """
  path = pathlib.Path(path)
  reader = _open(path)
  cfg = config(reader, path, dtype=dtype, param_dtype=param_dtype, **overrides)
  tensors = _validate(cfg, reader, path)
  params = assemble(cfg, lambda n: _dequantize(tensors[n], cfg, path), _NP_PARAM[param_dtype])
  return cfg, params


# ------------------------------------------------------------------ tokenizer


@functools.cache
def byte_chars() -> dict[int, str]:
  """GPT-2's byte -> printable character table (byte-level BPE spells tokens with it)."""
  keep = [*range(33, 127), *range(161, 173), *range(174, 256)]
  chars, extra = {b: chr(b) for b in keep}, 0
  for b in range(256):
    if b not in chars:
      chars[b], extra = chr(256 + extra), extra + 1
  return chars


_GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
_SPLITS = {  # tokenizer.ggml.pre -> the regex its merges were learned with
  "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"
  r"[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
  "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}
_GPT2_PRES = ("default", "gpt2", "smollm", "gpt-2")


def _pre_tokenizer(pre: str, path):
  from tokenizers import Regex, pre_tokenizers

  if pre in _GPT2_PRES:
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
  if pre not in _SPLITS:
    known = ", ".join([*_GPT2_PRES, *_SPLITS])
    raise CheckpointError(f"{path}: tokenizer.ggml.pre={pre!r} is not supported ({known})")
  return pre_tokenizers.Sequence(
    [
      pre_tokenizers.Split(Regex(_SPLITS[pre]), behavior="isolated"),
      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ]
  )


def load_tokenizer(path) -> HFTokenizer:
  """The tokenizer a GGUF file describes (byte-level BPE, `tokenizer.ggml.model=gpt2`)."""
  import tokenizers
  from tokenizers import AddedToken, decoders, models, processors

  path = pathlib.Path(path)
  reader = _open(path)
  kind = _get(reader, path, "tokenizer.ggml.model")
  if kind != "gpt2":
    raise CheckpointError(
      f"{path}: tokenizer.ggml.model={kind!r} is not supported (only byte-level BPE 'gpt2')"
    )
  tokens = list(_get(reader, path, "tokenizer.ggml.tokens"))
  types = list(_get(reader, path, "tokenizer.ggml.token_type", [1] * len(tokens)))
  merges = [tuple(m.split(" ", 1)) for m in _get(reader, path, "tokenizer.ggml.merges")]
  alphabet = set(byte_chars().values())

  def spelled(token: str) -> str:  # some converters store added tokens unspelled
    return token if set(token) <= alphabet else "".join(byte_chars()[b] for b in token.encode())

  tok = tokenizers.Tokenizer(models.BPE({spelled(t): i for i, t in enumerate(tokens)}, merges))
  tok.pre_tokenizer = _pre_tokenizer(_get(reader, path, "tokenizer.ggml.pre", "default"), path)
  tok.decoder = decoders.ByteLevel()
  control = [t for t, ty in zip(tokens, types, strict=True) if ty == 3 and set(t) <= alphabet]
  tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in control])
  user = [t for t, ty in zip(tokens, types, strict=True) if ty == 4]
  tok.add_tokens([AddedToken(spelled(t), special=False, normalized=False) for t in user])

  def token(key):
    i = _get(reader, path, f"tokenizer.ggml.{key}", None)
    if i is not None and not 0 <= int(i) < len(tokens):
      raise CheckpointError(f"{path}: tokenizer.ggml.{key}={i} is outside the vocabulary")
    return None if i is None else tokens[int(i)]

  bos = token("bos_token_id")
  if bos is not None and _get(reader, path, "tokenizer.ggml.add_bos_token", False):
    tok.post_processor = processors.TemplateProcessing(
      single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tokens.index(bos))]
    )
  stops = [_get(reader, path, f"tokenizer.ggml.{k}_token_id", None) for k in ("eot", "eom")]
  return HFTokenizer(
    tok,
    chat_template=_get(reader, path, "tokenizer.chat_template", None),
    bos_token=bos,
    eos_token=token("eos_token_id"),
    pad_token=token("padding_token_id"),
    extra_stop_ids=[int(i) for i in stops if i is not None],
  )
