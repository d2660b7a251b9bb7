"""models.io.hf without torch or transformers: save/load round trips and bad checkpoints."""

import json

import jax
import numpy as np
import pytest

from models import config as mconfig
from models import transformer
from models.io import hf


@pytest.mark.parametrize("param_dtype,shard", [("float32", None), ("bfloat16", 3000)])
def test_save_load_round_trip_exact(tmp_path, param_dtype, shard):
  cfg = mconfig.tiny(
    "qwen3_moe",
    vocab_size=64,
    param_dtype=param_dtype,
    rope_scaling=mconfig.RopeScaling(
      kind="yarn", factor=4.0, mscale=0.7, original_max_position_embeddings=128
    ),
  )
  params = transformer.init(cfg, jax.random.PRNGKey(0))
  hf.save(tmp_path, cfg, params, max_shard_bytes=shard)
  assert (tmp_path / "model.safetensors.index.json").is_file() == bool(shard)
  cfg2, params2 = hf.load(tmp_path, param_dtype=param_dtype)
  assert cfg2 == cfg
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(params2), strict=True):
    assert a.dtype == b.dtype and np.array_equal(np.asarray(a), np.asarray(b))
  assert jax.tree.structure(params) == jax.tree.structure(params2)


# ------------------------------------------------------------------ bad input


@pytest.fixture(scope="module")
def good_dir(tmp_path_factory):
  path = tmp_path_factory.mktemp("good")
  cfg = mconfig.tiny("qwen3", vocab_size=64, n_layers=1)
  hf.save(path, cfg, transformer.init(cfg, jax.random.PRNGKey(0)))
  return path


def _copy(src, dst):
  for f in src.iterdir():
    (dst / f.name).write_bytes(f.read_bytes())
  return dst


def _rewrite_tensors(path, fn):
  from safetensors.numpy import load_file, save_file

  tensors = fn(load_file(str(path / "model.safetensors")))
  save_file(tensors, str(path / "model.safetensors"))


def test_missing_config(tmp_path):
  with pytest.raises(hf.CheckpointError, match=r"config\.json: missing"):
    hf.load(tmp_path)


def test_missing_weights(good_dir, tmp_path):
  _copy(good_dir, tmp_path)
  (tmp_path / "model.safetensors").unlink()
  with pytest.raises(hf.CheckpointError, match="no model.safetensors"):
    hf.load(tmp_path)


def test_unknown_architecture(good_dir, tmp_path):
  _copy(good_dir, tmp_path)
  d = json.loads((tmp_path / "config.json").read_text())
  d["model_type"] = "gpt2"
  (tmp_path / "config.json").write_text(json.dumps(d))
  with pytest.raises(hf.CheckpointError, match=r"config\.json: unknown architecture.*gpt2"):
    hf.load(tmp_path)


K_NORM, UP = "model.layers.0.self_attn.k_norm.weight", "model.layers.0.mlp.up_proj.weight"


@pytest.mark.parametrize(
  "edit,message",
  [
    (
      lambda t: {k: v for k, v in t.items() if k != K_NORM},
      r"model\.safetensors: missing tensor model\.layers\.0\.self_attn\.k_norm\.weight "
      r"\(expected shape \(16,\)\)",
    ),
    (
      lambda t: {**t, UP: np.zeros((100, 64), np.float32)},
      r"model\.safetensors: tensor model\.layers\.0\.mlp\.up_proj\.weight: "
      r"expected shape \(128, 64\), found \(100, 64\)",
    ),
    (
      lambda t: {**t, "model.norm.weight": t["model.norm.weight"].astype(np.int8)},
      r"tensor model\.norm\.weight has unsupported dtype I8",
    ),
  ],
  ids=["missing", "shape", "dtype"],
)
def test_bad_tensor_is_a_one_line_error(good_dir, tmp_path, edit, message):
  _copy(good_dir, tmp_path)
  _rewrite_tensors(tmp_path, edit)
  with pytest.raises(hf.CheckpointError, match=message):
    hf.load(tmp_path)


def test_missing_shard(tmp_path):
  cfg = mconfig.tiny("llama", vocab_size=64, n_layers=1)
  hf.save(tmp_path, cfg, transformer.init(cfg, jax.random.PRNGKey(0)), max_shard_bytes=20000)
  shards = sorted(tmp_path.glob("model-*.safetensors"))
  assert len(shards) > 1
  shards[-1].unlink()
  with pytest.raises(hf.CheckpointError, match=f"index.json: shard {shards[-1].name} is missing"):
    hf.load(tmp_path)


def test_missing_tokenizer(good_dir):
  with pytest.raises(hf.CheckpointError, match=r"tokenizer\.json: missing"):
    hf.load_tokenizer(good_dir)


@pytest.mark.parametrize(
  "change,match",
  [
    ({"use_sliding_window": True}, "sliding-window attention is not supported"),
    ({"mlp_bias": True}, "mlp_bias is not supported"),
    ({"rope_parameters": {"rope_type": "longrope", "rope_theta": 1e4}}, "rope type 'longrope'"),
    ({"hidden_size": None}, "config.json: missing field 'hidden_size'"),
  ],
)
def test_unsupported_config_fields(change, match):
  d = hf.config_to_hf(mconfig.tiny("qwen3"))
  d.update(change)
  if change.get("hidden_size", 0) is None:
    del d["hidden_size"]
  with pytest.raises(hf.CheckpointError, match=match):
    hf.config_from_hf(d, "config.json")


def test_unexpected_tensor(good_dir, tmp_path):
  _copy(good_dir, tmp_path)
  _rewrite_tensors(tmp_path, lambda t: {**t, "model.layers.0.mlp.gate_proj.bias": np.zeros(128)})
  with pytest.raises(hf.CheckpointError, match=r"unexpected tensors for qwen3.*gate_proj\.bias"):
    hf.load(tmp_path)


def test_save_with_tokenizer_writes_a_complete_folder(tmp_path):
  from models.io.tokenizer import train_bpe

  tok = train_bpe(["hello world, agents use tools"] * 20, vocab_size=300)
  cfg = mconfig.tiny("qwen3", vocab_size=tok.vocab_size, n_layers=1)
  hf.save(tmp_path, cfg, transformer.init(cfg, jax.random.PRNGKey(0)), tokenizer=tok)
  back = hf.load_tokenizer(tmp_path)
  text = "<|im_start|>user\nhello agents<|im_end|>\n"
  assert back.encode(text) == tok.encode(text) and back.decode(back.encode(text)) == text
  assert (back.eos_id, back.pad_id, back.stop_ids) == (tok.eos_id, tok.pad_id, tok.stop_ids)
  assert back.chat_template == tok.chat_template
  with pytest.raises(ValueError, match="tokenizer must be an HFTokenizer"):
    hf.save(tmp_path, cfg, transformer.init(cfg, jax.random.PRNGKey(0)), tokenizer="byte")
