"""models.io.hf against `transformers`: logits parity, exported folders, tokenizer (needs torch).

Round trips and bad checkpoints, which need neither, are in test_models_hf_io.py.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from models import config as mconfig  # noqa: E402
from models import transformer  # noqa: E402
from models.io import hf  # noqa: E402

_COMMON = dict(
  vocab_size=96,
  hidden_size=32,
  intermediate_size=48,
  num_hidden_layers=2,
  num_attention_heads=4,
  num_key_value_heads=2,
  head_dim=8,
)

# One rope scaling variant per family, so every variant is also checked against HF.
_CASES = {
  "llama": (
    transformers.LlamaConfig,
    dict(
      max_position_embeddings=64,
      rope_theta=10000.0,
      attention_bias=True,
      rope_scaling=dict(
        rope_type="llama3",
        factor=8.0,
        low_freq_factor=1.0,
        high_freq_factor=4.0,
        original_max_position_embeddings=16,
      ),
    ),
  ),
  "qwen2": (
    transformers.Qwen2Config,
    dict(
      max_position_embeddings=64,
      tie_word_embeddings=True,
      rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=16),
    ),
  ),
  "qwen3": (
    transformers.Qwen3Config,
    dict(
      max_position_embeddings=16,
      tie_word_embeddings=True,
      rope_scaling=dict(rope_type="dynamic", factor=2.0),
    ),
  ),
  "qwen3_moe": (
    transformers.Qwen3MoeConfig,
    dict(
      max_position_embeddings=64,
      num_experts=4,
      num_experts_per_tok=2,
      moe_intermediate_size=16,
      norm_topk_prob=True,
      rope_scaling=dict(rope_type="linear", factor=2.0),
    ),
  ),
  "mixtral": (
    transformers.MixtralConfig,
    dict(max_position_embeddings=64, num_local_experts=4, num_experts_per_tok=2),
  ),
}


def _hf_model(arch, **extra):
  cls, kw = _CASES[arch]
  cfg = cls(**{**_COMMON, **kw, **extra})
  torch.manual_seed(0)
  model = transformers.AutoModelForCausalLM.from_config(cfg).eval()
  with torch.no_grad():  # random norms and biases too, not HF's ones/zeros
    for name, p in model.named_parameters():
      p.add_(0.1 * torch.randn_like(p)) if "norm" in name or "bias" in name else None
  return model


def _hf_logits(model, tokens, positions):
  with torch.no_grad():
    out = model(
      input_ids=torch.tensor(tokens),
      position_ids=torch.tensor(positions),
      output_router_logits=model.config.model_type in ("qwen3_moe", "mixtral"),
    )
  return out.logits.numpy(), out


@pytest.mark.parametrize("arch", sorted(_CASES))
def test_logits_match_transformers(arch, tmp_path):
  model = _hf_model(arch)
  model.save_pretrained(tmp_path)
  cfg, params = hf.load(tmp_path)
  assert cfg.arch == arch
  rng = np.random.RandomState(1)
  tokens = rng.randint(0, cfg.vocab_size, (2, 24))
  positions = np.stack([np.arange(24), np.arange(24) + 13])  # row 1 is an offset query
  want, out = _hf_logits(model, tokens, positions)
  # The chunked kernel (4 chunks) is the default path; one family also runs the reference.
  impls = ("chunked", "naive") if arch == "llama" else ("chunked",)
  for impl in impls:
    c = cfg.replace(attention=impl, attn_chunk=8)
    fwd = jax.jit(
      lambda p, t, pos, c=c: transformer.apply(p, t, c, positions_BT=pos, return_aux=True)
    )
    got, aux = fwd(params, jnp.asarray(tokens), jnp.asarray(positions))
    np.testing.assert_allclose(np.asarray(got), want, atol=1e-4, rtol=0)
  if cfg.is_moe:
    np.testing.assert_allclose(float(aux["moe_aux_loss"]), float(out.aux_loss), rtol=1e-5)


def test_config_fields(tmp_path):
  _hf_model("qwen3_moe").save_pretrained(tmp_path)
  cfg, _ = hf.load(tmp_path, dtype="bfloat16", remat="full")
  assert (cfg.n_experts, cfg.n_experts_per_tok, cfg.moe_d_ff) == (4, 2, 16)
  assert cfg.qk_norm and cfg.norm_topk_prob and not cfg.attn_bias
  assert cfg.rope_scaling == mconfig.RopeScaling(kind="linear", factor=2.0)
  assert (cfg.dtype, cfg.remat, cfg.param_dtype) == ("bfloat16", "full", "float32")


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
def test_exported_checkpoint_loads_in_transformers(arch, tmp_path):
  extra = {"attn_bias": True, "attn_out_bias": True} if arch == "llama" else {}
  cfg = mconfig.tiny(arch, vocab_size=64, max_seq_len=128, **extra)
  params = transformer.init(cfg, jax.random.PRNGKey(3))
  params = jax.tree.map(
    lambda p: p + 0.05 * jax.random.normal(jax.random.PRNGKey(4), p.shape), params
  )
  hf.save(tmp_path, cfg, params)
  model = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
  tokens = np.random.RandomState(0).randint(0, 64, (1, 12))
  want, _ = _hf_logits(model, tokens, np.arange(12)[None])
  got = transformer.apply(params, jnp.asarray(tokens), cfg)
  np.testing.assert_allclose(np.asarray(got), want, atol=1e-4, rtol=0)


# ------------------------------------------------------------------ tokenizer

_TEMPLATE = (
  "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}[SYS] "
  "{{ m['content'] | trim }}\n{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
  "<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
  "{% endif %}"
)


def _write_tokenizer(path, template_in_jinja_file):
  import tokenizers
  from tokenizers import models, pre_tokenizers, trainers

  tok = tokenizers.Tokenizer(models.BPE(unk_token="<unk>"))
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = tokenizers.decoders.ByteLevel()
  specials = ["<unk>", "<s>", "<|im_start|>", "<|im_end|>", "<pad>"]
  trainer = trainers.BpeTrainer(
    vocab_size=200, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
  )
  corpus = ["the quick brown fox jumps over the lazy dog", "hello world, agents use tools"] * 20
  tok.train_from_iterator(corpus, trainer)
  tok.save(str(path / "tokenizer.json"))
  tcfg = {
    "bos_token": "<s>",
    "eos_token": "<|im_end|>",
    "pad_token": "<pad>",
    "tokenizer_class": "PreTrainedTokenizerFast",
  }
  if template_in_jinja_file:
    (path / "chat_template.jinja").write_text(_TEMPLATE)
  else:
    tcfg["chat_template"] = _TEMPLATE
  (path / "tokenizer_config.json").write_text(json.dumps(tcfg))
  (path / "generation_config.json").write_text(json.dumps({"eos_token_id": [3, 0]}))


@pytest.mark.parametrize("jinja_file", [False, True])
def test_tokenizer_matches_transformers(tmp_path, jinja_file):
  _write_tokenizer(tmp_path, jinja_file)
  ours = hf.load_tokenizer(tmp_path)
  ref = transformers.AutoTokenizer.from_pretrained(tmp_path)
  messages = [
    {"role": "system", "content": " be brief "},
    {"role": "user", "content": "hello world, the fox"},
  ]
  text = ours.apply_chat_template(messages)
  assert text == ref.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
  assert text.startswith("<s>[SYS] be brief\n<|im_start|>user")
  ids = ours.encode(text)
  assert ids == ref.encode(text, add_special_tokens=False)
  assert ours.decode(ids) == text
  assert (ours.eos_id, ours.pad_id, ours.bos_id) == (3, 4, 1)
  assert ours.stop_ids == (3, 0)
  assert ours.vocab_size == ref.vocab_size == len(ref)
