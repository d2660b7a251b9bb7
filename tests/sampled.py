"""Completions sampled by the real engine for the mismatch tests: random prompts, seed i each."""

import numpy as np

from models.inference.generator import GenerationRequest, Generator
from models.sampling import SamplingParams


def sample(engine, vocab_size: int, n: int, new_tokens: int = 12, **sampling):
  """[(prompt ids, GenerationResult)] of n random prompts (3-11 tokens) through `engine`;
  `sampling`: SamplingParams fields (the seed is the prompt's index)."""
  gen = Generator(engine, warmup=False)
  rng = np.random.default_rng(0)
  prompts = [rng.integers(1, vocab_size, int(rng.integers(3, 12))).tolist() for _ in range(n)]
  try:
    reqs = [
      GenerationRequest(p, max_new_tokens=new_tokens, sampling=SamplingParams(seed=i, **sampling))
      for i, p in enumerate(prompts)
    ]
    results = gen.generate(reqs)
  finally:
    gen.close()
  return list(zip(prompts, results, strict=True))
