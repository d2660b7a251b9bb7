"""The README's engine snippet, runnable: paged-KV engine, a generator, sessions, a hot swap.

python examples/engine.py        # a tiny random model and the byte tokenizer (no download)
"""

import jax

from models import transformer
from models.config import tiny
from models.inference.engine import Engine
from models.inference.generator import GenerationRequest, Generator
from models.io.tokenizer import ByteTokenizer
from models.sampling import SamplingParams


def main() -> list:
  tok = ByteTokenizer()
  cfg = tiny("qwen3", vocab_size=260, max_seq_len=128)
  params = transformer.init(cfg, jax.random.key(0))
  engine = Engine(cfg, params, max_concurrent_decodes=4, page_size=16)  # kv_dtype='int8', ...
  gen = Generator(engine, tokenizer=tok, prefix_caching=True, warmup=False)
  try:
    prompt_ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": "hi"}]))
    req = GenerationRequest(
      prompt_ids, max_new_tokens=8,
      sampling=SamplingParams(temperature=1.0, top_p=1.0, seed=7),
      stop_token_ids=(tok.eos_id,), session_id="episode-42",
    )  # fmt: skip
    res = gen.submit(req).result()  # tokens, logprobs, versions, finish_reason, prompt_len, ...
    print(f"{len(res.tokens)} tokens, finish_reason={res.finish_reason}, versions={res.versions}")
    new_params = transformer.init(cfg, jax.random.key(1))
    gen.load_params(new_params, version=3)  # hot swap: next decode dispatch, no recompilation
    again = gen.submit(req).result()  # the same session: its prompt is a cached prefix
    print(f"after the swap: versions={again.versions}, cached_prefix_len={again.cached_prefix_len}")
    gen.release_session("episode-42")
  finally:
    gen.close()
  return [res, again]


if __name__ == "__main__":
  main()
