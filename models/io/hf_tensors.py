"""The Hugging Face tensor layout of our params, and writing a checkpoint folder.

`tensor_specs` names every HF tensor of a config with its HF shape and where it lives in our
params pytree; `assemble` fills params from any source of HF-named arrays (safetensors in
`models.io.hf`, dequantised GGUF in `models.io.gguf`); `save` writes config.json + safetensors (and
the tokenizer files when given one). HF linear weights are [out, in]; ours are [in, ...out].

Legend: L layers, E experts, D d_model, H heads, K kv heads, d head_dim, F d_ff, V vocab.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable

import jax.numpy as jnp
import numpy as np
from safetensors.numpy import save_file

from models import transformer
from models.config import ModelConfig
from models.io.hf_config import config_to_hf
from models.io.tokenizer import HFTokenizer, save_tokenizer

_LAYER_NAMES = {  # our layer leaf -> (HF name under model.layers.{i}., HF [out, in] layout?)
  "attn_norm": ("input_layernorm.weight", False),
  "wq": ("self_attn.q_proj.weight", True),
  "wk": ("self_attn.k_proj.weight", True),
  "wv": ("self_attn.v_proj.weight", True),
  "wo": ("self_attn.o_proj.weight", True),
  "bq": ("self_attn.q_proj.bias", False),
  "bk": ("self_attn.k_proj.bias", False),
  "bv": ("self_attn.v_proj.bias", False),
  "bo": ("self_attn.o_proj.bias", False),
  "q_norm": ("self_attn.q_norm.weight", False),
  "k_norm": ("self_attn.k_norm.weight", False),
  "mlp_norm": ("post_attention_layernorm.weight", False),
  "w_gate": ("mlp.gate_proj.weight", True),
  "w_up": ("mlp.up_proj.weight", True),
  "w_down": ("mlp.down_proj.weight", True),
}
_MOE_NAMES = {  # arch -> (router name, expert prefix, {our leaf: expert weight name})
  "qwen3_moe": (
    "mlp.gate.weight",
    "mlp.experts",
    {"we_gate": "gate_proj", "we_up": "up_proj", "we_down": "down_proj"},
  ),
  "mixtral": (
    "block_sparse_moe.gate.weight",
    "block_sparse_moe.experts",
    {"we_gate": "w1", "we_up": "w3", "we_down": "w2"},
  ),
}


def tensor_specs(cfg: ModelConfig):
  """[(leaf path, index, HF name, HF shape, transposed)] for every tensor of `cfg`."""
  shapes = transformer.param_shapes(cfg)
  specs = [
    (("embed",), (), "model.embed_tokens.weight", shapes["embed"], False),
    (("final_norm",), (), "model.norm.weight", shapes["final_norm"], False),
  ]
  if not cfg.tie_embeddings:
    specs.append((("lm_head",), (), "lm_head.weight", shapes["lm_head"][::-1], True))
  for leaf, full in shapes["layers"].items():
    for i in range(cfg.n_layers):
      pre = f"model.layers.{i}."
      if leaf in _LAYER_NAMES:
        name, tr = _LAYER_NAMES[leaf]
        hf = _layer_hf_shape(leaf, full[1:], tr)
        specs.append((("layers", leaf), (i,), pre + name, hf, tr))
      elif leaf == "router":
        specs.append((("layers", leaf), (i,), pre + _MOE_NAMES[cfg.arch][0], full[1:][::-1], True))
      else:
        _, prefix, names = _MOE_NAMES[cfg.arch]
        for e in range(cfg.n_experts):
          name = f"{pre}{prefix}.{e}.{names[leaf]}.weight"
          specs.append((("layers", leaf), (i, e), name, full[2:][::-1], True))
  return specs


def _layer_hf_shape(leaf: str, shape: tuple[int, ...], transpose: bool) -> tuple[int, ...]:
  if not transpose:
    return (int(np.prod(shape)),)
  if leaf == "wo":  # [H, d, D] -> [D, H*d]
    return (shape[2], shape[0] * shape[1])
  return (int(np.prod(shape[1:])), shape[0])  # [D, *out] -> [prod(out), D]


def to_ours(arr: np.ndarray, slot_shape, transpose: bool) -> np.ndarray:
  return (arr.T if transpose else arr).reshape(slot_shape)


def to_hf(val: np.ndarray, hf_shape, transpose: bool) -> np.ndarray:
  return np.ascontiguousarray(val.reshape(hf_shape[::-1]).T if transpose else val.reshape(hf_shape))


def assemble(cfg: ModelConfig, get: Callable[[str], np.ndarray], np_dtype) -> dict:
  """Params of `cfg` with every tensor read as `get(hf_name)` (HF layout), cast to np_dtype."""
  specs = tensor_specs(cfg)
  shapes = transformer.param_shapes(cfg)
  flat = {("layers", k): np.empty(v, np_dtype) for k, v in shapes["layers"].items()}
  flat.update({(k,): np.empty(v, np_dtype) for k, v in shapes.items() if k != "layers"})
  for leaf, index, name, _, transpose in specs:
    slot = flat[leaf][index] if index else flat[leaf]
    slot[...] = to_ours(get(name), slot.shape, transpose).astype(np_dtype)
  params = {k[0]: jnp.asarray(v) for k, v in flat.items() if len(k) == 1}
  params["layers"] = {k[1]: jnp.asarray(v) for k, v in flat.items() if len(k) == 2}
  return params


# ------------------------------------------------------------------ save


def save(
  path, cfg: ModelConfig, params, *, max_shard_bytes: int | None = None, tokenizer=None
) -> None:
  """Writes config.json and safetensors (sharded with an index if max_shard_bytes is set).

  Tensors keep the params' dtype, so save -> load is exact. Earlier model*.safetensors
  files and index in the folder are removed first so a stale shard cannot be read back.
  With `tokenizer` (an HFTokenizer) its tokenizer.json, tokenizer_config.json and
  generation_config.json are written too, so the folder is a complete checkpoint.
  """
  path = pathlib.Path(path)
  hf_cfg = config_to_hf(cfg)
  shapes = transformer.param_shapes(cfg)
  got = {k: tuple(np.shape(v)) for k, v in params.items() if k != "layers"}
  got.update({("layers", k): tuple(np.shape(v)) for k, v in params["layers"].items()})
  want = {k: v for k, v in shapes.items() if k != "layers"}
  want.update({("layers", k): v for k, v in shapes["layers"].items()})
  if got != want:
    bad = sorted(str(k) for k in set(got) ^ set(want) | {k for k in got if got[k] != want.get(k)})
    raise ValueError(f"params do not match the config: {bad[:5]}")
  host = {k: np.asarray(v) for k, v in params.items() if k != "layers"}
  host.update({("layers", k): np.asarray(v) for k, v in params["layers"].items()})
  tensors = {}
  for leaf, index, name, hf_shape, transpose in tensor_specs(cfg):
    val = host[leaf if len(leaf) == 2 else leaf[0]]
    tensors[name] = to_hf(val[index] if index else val, hf_shape, transpose)
  path.mkdir(parents=True, exist_ok=True)
  for old in [*path.glob("model*.safetensors"), path / "model.safetensors.index.json"]:
    old.unlink(missing_ok=True)
  _write_tensors(path, tensors, max_shard_bytes)
  (path / "config.json").write_text(json.dumps(hf_cfg, indent=2) + "\n")
  if tokenizer is not None:
    if not isinstance(tokenizer, HFTokenizer):
      raise ValueError(f"save: tokenizer must be an HFTokenizer, got {type(tokenizer).__name__}")
    save_tokenizer(tokenizer, path)


def _write_tensors(path: pathlib.Path, tensors: dict, max_shard_bytes: int | None) -> None:
  meta = {"format": "pt"}
  if not max_shard_bytes:
    save_file(tensors, str(path / "model.safetensors"), metadata=meta)
    return
  shards, cur, size = [], {}, 0
  for name, arr in tensors.items():
    if cur and size + arr.nbytes > max_shard_bytes:
      shards.append(cur)
      cur, size = {}, 0
    cur[name], size = arr, size + arr.nbytes
  shards.append(cur)
  weight_map = {}
  for i, shard in enumerate(shards):
    fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
    save_file(shard, str(path / fname), metadata=meta)
    weight_map.update(dict.fromkeys(shard, fname))
  index = {
    "metadata": {"total_size": sum(a.nbytes for a in tensors.values())},
    "weight_map": weight_map,
  }
  (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
