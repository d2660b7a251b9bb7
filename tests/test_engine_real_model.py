"""The engine on the real SmolLM2-135M-Instruct: greedy decoding equals transformers' greedy.

Both sides load the named checkpoint's fp32 HF folder (`smollm2-135m-instruct`, converted once
into $AGENTRL_CACHE/models by models.io.checkpoints and shared with test_models_smollm2), so no
GGUF dequantisation or export runs here. The engine compiles one variant of each step (batch 1,
one prompt bucket, all pages): at 30 layers the compiles are most of this test's time.
Skipped when the package is missing, unless $CI is set.
"""

from __future__ import annotations

import numpy as np
import pytest

from envs.sandbox import testing
from models.io import checkpoints
from models.io.hf_config import CheckpointError

NAME = "smollm2-135m-instruct"
NEW = 64


@pytest.fixture(scope="module")
def folder():
  try:
    return checkpoints.resolve(NAME)
  except CheckpointError as e:
    testing.missing(str(e))


def test_greedy_equals_transformers_for_64_tokens(folder):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")

  from models.inference.engine import Engine
  from models.io import hf

  tok = hf.load_tokenizer(folder)
  prompt = tok.encode(
    "<|im_start|>user\nWrite a Python function that reverses a list.<|im_end|>\n"
    "<|im_start|>assistant\n"
  )
  model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
  with torch.no_grad():
    ids = torch.tensor([prompt])
    ref = model.generate(
      ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW, min_new_tokens=NEW,
      do_sample=False, pad_token_id=0,
    )[0, len(prompt) :].tolist()  # fmt: skip
  del model
  cfg, params = hf.load(folder)
  assert cfg.n_layers == 30 and cfg.tie_embeddings
  # Engine steps directly: one prefill, one insert and one decode variant to compile.
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
