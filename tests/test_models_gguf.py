"""models.io.gguf: tiny GGUF files of every supported type, bad files, and the real SmolLM2 file.

Parity is against transformers' own GGUF loading (its dequantisation and q/k un-permutation
are an independent implementation); F32 files are also checked to give back exactly the
params they were written from, which checks the un-permutation without transformers.
"""

import gguf
import gguf_files
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from models import config as mconfig
from models import transformer
from models.io import gguf as mgguf
from models.io import hf

_TYPES = mgguf.SUPPORTED_TYPES


def _tiny(arch, seed=0):
  # Width 256 so every matrix row is whole K-quant blocks; head_dim 128 as in real Qwen3
  # (transformers reads no head_dim from a GGUF and falls back to its config default).
  vocab = len(gguf_files.tiny_vocab()[0])
  cfg = mconfig.tiny(arch, vocab_size=vocab, d_model=256, n_heads=2, n_kv_heads=1,
                     head_dim=128, d_ff=512, max_seq_len=64, norm_eps=1e-5)  # fmt: skip
  params = transformer.init(cfg, jax.random.PRNGKey(seed))
  noise = jax.random.PRNGKey(seed + 1)
  params = jax.tree.map(lambda p: p + 0.05 * jax.random.normal(noise, p.shape), params)
  return cfg, params


@pytest.mark.parametrize("arch", mgguf.ARCHS)
def test_f32_file_gives_back_the_params_exactly(arch, tmp_path):
  cfg, params = _tiny(arch)
  path = gguf_files.write(tmp_path / "m.gguf", cfg, params, "F32")
  cfg2, params2 = mgguf.load(path)
  assert cfg2 == cfg
  assert jax.tree.structure(params2) == jax.tree.structure(params)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(params2), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  cfg3, params3 = hf.load(path)  # hf.load takes a .gguf file wherever it takes a folder
  assert cfg3 == cfg and np.array_equal(params3["embed"], params2["embed"])


def test_unpermute_inverts_llama_cpp_row_order():
  w = np.arange(3 * 8 * 2).reshape(3 * 8, 2)  # 3 heads of head_dim 8
  back = mgguf.unpermute_rows(gguf_files.permute_rows(w, 3), 3)
  np.testing.assert_array_equal(back, w)
  # Hand case, one head of head_dim 4: HF rows [a0 a1 b0 b1] (halves) -> [a0 b0 a1 b1] (pairs).
  np.testing.assert_array_equal(mgguf.unpermute_rows(np.array([0, 2, 1, 3]), 1), [0, 1, 2, 3])


def _transformers_logits(path, tokens):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  model = transformers.AutoModelForCausalLM.from_pretrained(
    str(path.parent), gguf_file=path.name, dtype=torch.float32
  ).eval()
  with torch.no_grad():
    return model(input_ids=torch.tensor(tokens)).logits.numpy()


_PARITY = [("llama", t) for t in _TYPES] + [("qwen2", "Q8_0"), ("qwen3", "Q4_K")]


@pytest.mark.parametrize("arch,qtype", _PARITY)
def test_logits_match_transformers_gguf_loading(arch, qtype, tmp_path):
  cfg, params = _tiny(arch)
  path = gguf_files.write(tmp_path / f"{arch}-{qtype}.gguf", cfg, params, qtype)
  assert {t.tensor_type.name for t in gguf.GGUFReader(str(path)).tensors} == {"F32", qtype}
  tokens = np.random.RandomState(0).randint(0, cfg.vocab_size, (1, 12))
  want = _transformers_logits(path, tokens)
  cfg2, params2 = mgguf.load(path)
  got = transformer.apply(params2, jnp.asarray(tokens), cfg2)
  assert want.std() > 0.5  # random enough that a wrong layout would show
  np.testing.assert_allclose(np.asarray(got), want, atol=1e-4, rtol=0)


def test_tiny_tokenizer(tmp_path):
  cfg, params = _tiny("qwen3")
  template = "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>{% endfor %}"
  path = gguf_files.write(tmp_path / "m.gguf", cfg, params, chat_template=template)
  tok = hf.load_tokenizer(path)
  tokens, _, _ = gguf_files.tiny_vocab()
  # Ids 0-255 are the bytes, 256-260 the merges, 261-263 the specials (kept whole).
  assert tok.encode("<|im_start|>the  in<|im_end|>") == [262, ord("t"), 257, 32, 32, 259, 263]
  assert tok.encode(" the") == [tokens.index("Ġthe")] == [258]
  assert (tok.eos_id, tok.bos_id, tok.pad_id) == (263, 262, 261)
  assert tok.decode(tok.encode("héllo 🙂")) == "héllo 🙂"
  assert tok.apply_chat_template([{"role": "user", "content": "x"}]) == "<|im_start|>x<|im_end|>"


# ------------------------------------------------------------------ bad files


@pytest.fixture(scope="module")
def good_file(tmp_path_factory):
  cfg, params = _tiny("llama")
  return gguf_files.write(tmp_path_factory.mktemp("gguf") / "good.gguf", cfg, params, "Q8_0")


def test_truncated_file_names_the_tensor(good_file, tmp_path):
  bad = tmp_path / "cut.gguf"
  bad.write_bytes(good_file.read_bytes()[:-1000])
  last = gguf.GGUFReader(str(good_file)).tensors[-1].name
  with pytest.raises(hf.CheckpointError, match=rf"cut\.gguf: tensor {last}: file truncated"):
    mgguf.load(bad)


def test_corrupt_header(good_file, tmp_path):
  bad = tmp_path / "head.gguf"
  bad.write_bytes(good_file.read_bytes()[:200])
  with pytest.raises(hf.CheckpointError, match=r"head\.gguf: not a readable GGUF file"):
    mgguf.load(bad)
  bad.write_bytes(b"GGUX" + good_file.read_bytes()[4:])
  with pytest.raises(hf.CheckpointError, match="magic"):
    mgguf.load(bad)


def test_unknown_architecture(tmp_path):
  cfg, params = _tiny("llama")
  path = gguf_files.write(tmp_path / "m.gguf", cfg, params, arch="gpt2")
  with pytest.raises(hf.CheckpointError, match=r"unknown architecture .*'gpt2'"):
    mgguf.load(path)


def test_unsupported_quantisation_names_the_tensor(tmp_path):
  w = gguf.GGUFWriter(str(tmp_path / "q.gguf"), "llama")
  w.add_tensor("blk.0.ffn_up.weight", np.zeros((4, 176), np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q5_K)  # fmt: skip
  w.write_header_to_file()
  w.write_kv_data_to_file()
  w.write_tensors_to_file()
  w.close()
  with pytest.raises(hf.CheckpointError, match=r"tensor blk\.0\.ffn_up\.weight: quantisation Q5_K"):
    mgguf.load(tmp_path / "q.gguf")


def test_missing_tensor(tmp_path):
  cfg, params = _tiny("qwen3")
  path = gguf_files.write(tmp_path / "m.gguf", cfg, params, drop=("blk.1.attn_k_norm.weight",))
  with pytest.raises(
    hf.CheckpointError,
    match=r"missing tensor blk\.1\.attn_k_norm\.weight \(expected shape \(128,\)",
  ):
    mgguf.load(path)


def test_missing_file(tmp_path):
  with pytest.raises(hf.CheckpointError, match=r"nope\.gguf: missing"):
    hf.load(tmp_path / "nope.gguf")


def test_unsupported_tokenizer_model(tmp_path):
  cfg, params = _tiny("llama")
  path = gguf_files.write(tmp_path / "m.gguf", cfg, params, tokenizer_model="llama")
  with pytest.raises(hf.CheckpointError, match=r"tokenizer\.ggml\.model='llama' is not supported"):
    mgguf.load_tokenizer(path)
