"""LoRA export: merged weights as a Hugging Face folder, or the adapters alone in PEFT layout.

PEFT layout (what `peft.PeftModel.from_pretrained(model, folder)` reads):
  adapter_config.json          peft_type LORA, r, lora_alpha, target_modules, use_rslora, ...
  adapter_model.safetensors    base_model.model.model.layers.{i}.{module}.lora_A.weight [r, in]
                               base_model.model.model.layers.{i}.{module}.lora_B.weight [out, r]
PEFT's update is lora_B @ lora_A ([out, in], HF's linear layout); ours is A [*in, r] @ B
[r, *out], so lora_A = A.reshape(in, r).T and lora_B = B.reshape(r, out).T.

Legend: L layers, r rank.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

from models import lora
from models.config import ModelConfig
from models.io import hf
from models.io.hf_config import CheckpointError

# Our layer leaf -> PEFT module path under model.layers.{i}.
MODULES = {
  "wq": "self_attn.q_proj",
  "wk": "self_attn.k_proj",
  "wv": "self_attn.v_proj",
  "wo": "self_attn.o_proj",
  "w_gate": "mlp.gate_proj",
  "w_up": "mlp.up_proj",
  "w_down": "mlp.down_proj",
}
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"


def save_merged(path, model_cfg: ModelConfig, params, adapters, cfg: lora.LoraConfig) -> None:
  """hf.save of W + scale * A @ B: a plain checkpoint any HF loader (and ours) reads."""
  hf.save(path, model_cfg, lora.merge(params, adapters, cfg))


def tensor_names(leaf: str, layer: int) -> tuple[str, str]:
  """PEFT's (lora_A, lora_B) tensor names of one layer's adapter."""
  pre = f"base_model.model.model.layers.{layer}.{MODULES[leaf]}"
  return f"{pre}.lora_A.weight", f"{pre}.lora_B.weight"


def save_adapters(path, model_cfg: ModelConfig, adapters, cfg: lora.LoraConfig, base_model=""):
  """Writes adapter_config.json + adapter_model.safetensors (fp32) into folder `path`."""
  path = pathlib.Path(path)
  tensors = {}
  for leaf, ab in adapters.items():
    a, b = np.asarray(ab["a"], np.float32), np.asarray(ab["b"], np.float32)
    r = a.shape[-1]
    for i in range(model_cfg.n_layers):
      name_a, name_b = tensor_names(leaf, i)
      tensors[name_a] = np.ascontiguousarray(a[i].reshape(-1, r).T)
      tensors[name_b] = np.ascontiguousarray(b[i].reshape(r, -1).T)
  config = {
    "peft_type": "LORA",
    "task_type": "CAUSAL_LM",
    "base_model_name_or_path": str(base_model),
    "r": cfg.rank,
    "lora_alpha": cfg.alpha,
    "use_rslora": cfg.rslora,
    "target_modules": sorted(MODULES[leaf].rsplit(".", 1)[1] for leaf in adapters),
    "lora_dropout": 0.0,
    "bias": "none",
    "fan_in_fan_out": False,
    "init_lora_weights": True,
    "inference_mode": True,
  }
  path.mkdir(parents=True, exist_ok=True)
  save_file(tensors, str(path / WEIGHTS_FILE), metadata={"format": "pt"})
  (path / CONFIG_FILE).write_text(json.dumps(config, indent=2) + "\n")


def load_adapters(path, model_cfg: ModelConfig) -> tuple[lora.LoraConfig, dict]:
  """(LoraConfig, adapters) from a PEFT folder; raises CheckpointError naming file and tensor."""
  path = pathlib.Path(path)
  cfg_file, weights = path / CONFIG_FILE, path / WEIGHTS_FILE
  for f in (cfg_file, weights):
    if not f.is_file():
      raise CheckpointError(
        f"{f}: missing (a PEFT adapter folder needs {CONFIG_FILE} and {WEIGHTS_FILE})"
      )
  raw = json.loads(cfg_file.read_text())
  if raw.get("peft_type") != "LORA":
    raise CheckpointError(f"{cfg_file}: peft_type {raw.get('peft_type')!r}, expected 'LORA'")
  cfg = lora.LoraConfig(
    rank=int(raw["r"]),
    alpha=float(raw["lora_alpha"]),
    targets=tuple(raw["target_modules"]),
    rslora=bool(raw.get("use_rslora", False)),
  )
  shapes = lora.adapter_shapes(model_cfg, cfg)
  adapters = {}
  with safe_open(str(weights), framework="numpy") as f:
    names = set(f.keys())
    for leaf, sh in shapes.items():
      a_L, b_L = [], []
      for i in range(model_cfg.n_layers):
        for name, out, want in zip(tensor_names(leaf, i), (a_L, b_L), _hf_shapes(sh), strict=True):
          if name not in names:
            raise CheckpointError(f"{weights}: tensor {name} missing")
          t = f.get_tensor(name)
          if tuple(t.shape) != want:
            raise CheckpointError(f"{weights}: tensor {name} has shape {t.shape}, expected {want}")
          out.append(t)
      r = cfg.rank
      a = np.stack([t.T.reshape(*sh["a"][1:]) for t in a_L]).astype(np.float32)
      b = np.stack([t.T.reshape(r, *sh["b"][2:]) for t in b_L]).astype(np.float32)
      adapters[leaf] = {"a": a, "b": b}
  return cfg, adapters


def _hf_shapes(sh) -> tuple[tuple[int, int], tuple[int, int]]:
  r = sh["a"][-1]
  return (r, int(np.prod(sh["a"][1:-1]))), (int(np.prod(sh["b"][2:])), r)
