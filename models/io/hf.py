"""Hugging Face checkpoint interop: a local folder <-> (ModelConfig, params).

Reads config.json and model.safetensors (or a sharded model.safetensors.index.json);
writes the same layout back (round trip exact). Every tensor's name, dtype and shape is
checked against the config before any data is read, so a bad folder raises
`CheckpointError` naming the file, the tensor and expected vs found shape, and nothing
half-loaded is ever returned. Wherever a folder is accepted, a named checkpoint
(`smollm2-135m-instruct`, see `models.io.checkpoints`) or a `.gguf` file is accepted too.

Legend: L layers, E experts, D d_model, H heads, K kv heads, d head_dim, F d_ff, V vocab.
"""

from __future__ import annotations

import contextlib
import json
import pathlib

import ml_dtypes
import numpy as np
from safetensors import safe_open

from models.config import ModelConfig
from models.io import checkpoints, gguf
from models.io.hf_config import CheckpointError, config_from_hf, config_to_hf
from models.io.hf_tensors import assemble, save, tensor_specs
from models.io.tokenizer import HFTokenizer

__all__ = [
  "CheckpointError",
  "config_from_hf",
  "config_to_hf",
  "load",
  "load_tokenizer",
  "resolve",
  "save",
  "tensor_specs",
]

resolve = checkpoints.resolve

_DTYPES = {"F32": np.float32, "BF16": ml_dtypes.bfloat16, "F16": np.float16}
_NP_PARAM = {"float32": np.float32, "bfloat16": ml_dtypes.bfloat16}
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)  # buffers some old checkpoints carry


# ------------------------------------------------------------------ load


def _read_json(file: pathlib.Path) -> dict:
  if not file.is_file():
    raise CheckpointError(f"{file}: missing")
  try:
    return json.loads(file.read_text())
  except json.JSONDecodeError as e:
    raise CheckpointError(f"{file}: invalid JSON: {e}") from e


def _weight_files(path: pathlib.Path) -> dict[str, pathlib.Path]:
  """HF tensor name -> the safetensors file holding it."""
  index = path / "model.safetensors.index.json"
  single = path / "model.safetensors"
  if index.is_file():
    weight_map = _read_json(index).get("weight_map")
    if not isinstance(weight_map, dict):
      raise CheckpointError(f"{index}: no 'weight_map'")
    files = {name: path / fname for name, fname in weight_map.items()}
    for f in sorted(set(files.values())):
      if not f.is_file():
        raise CheckpointError(f"{index}: shard {f.name} is missing ({f})")
    return files
  if single.is_file():
    return {}  # filled from the file's own header
  raise CheckpointError(
    f"{path}: no model.safetensors or model.safetensors.index.json "
    "(only safetensors checkpoints are supported)"
  )


def _headers(path: pathlib.Path, files: dict[str, pathlib.Path], stack):
  """name -> (open handle, file, dtype string, shape), reading headers only."""
  if not files:
    files = {None: path / "model.safetensors"}
  out, handles = {}, {}
  for f in sorted(set(files.values())):
    try:
      handles[f] = stack.enter_context(safe_open(str(f), framework="numpy"))
    except Exception as e:  # safetensors raises its own error types for bad headers
      raise CheckpointError(f"{f}: cannot read safetensors header: {e}") from e
    for name in handles[f].keys():
      if None in files or files.get(name) == f:
        sl = handles[f].get_slice(name)
        out[name] = (handles[f], f, sl.get_dtype(), tuple(sl.get_shape()))
  for name, f in files.items():
    if name is not None and name not in out:
      raise CheckpointError(f"{f}: tensor {name} listed in the index is not in the file")
  return out


def _validate(cfg: ModelConfig, specs, headers, path: pathlib.Path) -> None:
  expected = {s[2] for s in specs}
  for _, _, name, shape, _ in specs:
    if name not in headers:
      where = (
        "model.safetensors.index.json"
        if (path / "model.safetensors.index.json").is_file()
        else "model.safetensors"
      )
      raise CheckpointError(f"{path / where}: missing tensor {name} (expected shape {shape})")
    _, f, dt, found = headers[name]
    if dt not in _DTYPES:
      raise CheckpointError(
        f"{f}: tensor {name} has unsupported dtype {dt} (supported: {sorted(_DTYPES)})"
      )
    if found != tuple(shape):
      raise CheckpointError(f"{f}: tensor {name}: expected shape {tuple(shape)}, found {found}")
  ignored = {"lm_head.weight"} if cfg.tie_embeddings else set()
  extra = sorted(
    n
    for n in headers
    if n not in expected and n not in ignored and not n.endswith(_IGNORED_SUFFIXES)
  )
  if extra:
    raise CheckpointError(
      f"{headers[extra[0]][1]}: unexpected tensors for {cfg.arch} "
      f"(unsupported feature?): {extra[:5]}"
    )


def load(path, *, dtype: str = "float32", param_dtype: str = "float32", **overrides):
  """Loads a checkpoint into (ModelConfig, params).

  Args:
    path: folder with config.json and model.safetensors (or a sharded index), a named
      checkpoint (`models.io.checkpoints.NAMED`) or a `.gguf` file.
    dtype: compute dtype recorded in the config ('float32' or 'bfloat16').
    param_dtype: dtype of the returned params.
    **overrides: other ModelConfig fields (remat, attention, attn_chunk, ...).
  Raises:
    CheckpointError: naming the file, tensor and expected vs found shape.
  """
  path = resolve(path)
  if path.suffix == ".gguf":
    return gguf.load(path, dtype=dtype, param_dtype=param_dtype, **overrides)
  cfg_file = path / "config.json"
  cfg = config_from_hf(
    _read_json(cfg_file), cfg_file, dtype=dtype, param_dtype=param_dtype, **overrides
  )
  with contextlib.ExitStack() as stack:
    headers = _headers(path, _weight_files(path), stack)
    _validate(cfg, tensor_specs(cfg), headers, path)
    params = assemble(cfg, lambda name: headers[name][0].get_tensor(name), _NP_PARAM[param_dtype])
  return cfg, params


def load_tokenizer(path) -> HFTokenizer:
  """The checkpoint's tokenizer (tokenizer.json + chat template, or a GGUF's vocabulary)."""
  path = resolve(path)
  if path.suffix == ".gguf":
    return gguf.load_tokenizer(path)
  return HFTokenizer.from_dir(path)
