"""Gateway overhead: tokens/s through the OpenAI HTTP API vs the engine directly, same run.

Model: the ~20M Qwen3-shaped config (width 512, 4 layers, d_ff 2048) with the byte vocabulary
(260, so the byte tokenizer decodes every sampled id), random weights, fp32. Each run sends
--clients concurrent requests of a --prompt-token prompt for --new tokens (greedy, ignore_eos,
so every request generates exactly --new tokens), alternating:
  direct   Generator.submit of all requests at once, wait for all
  http     one `openai` client per thread, /v1/completions (or --endpoint=chat) over loopback
It prints medians of --repeats runs and http/direct (the fraction of engine throughput that
survives HTTP, JSON and the event loop), plus the engine's tokens per decode step (batching).
Run: python benchmarks/gateway.py [--clients=32] [--repeats=3] [--warmup=2] [--endpoint=completions]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from anywhere

import jax  # noqa: E402
import openai  # noqa: E402

from envs.gateway import BackgroundServer, Gateway, make_app  # noqa: E402
from models import config  # noqa: E402
from models import transformer as tfm  # noqa: E402
from models.inference.engine import Engine  # noqa: E402
from models.inference.generator import GenerationRequest, Generator  # noqa: E402
from models.io.tokenizer import ByteTokenizer  # noqa: E402
from models.sampling import SamplingParams  # noqa: E402


def _prompt(i: int, n: int) -> list[int]:
  return [(7 * i + j) % 250 + 1 for j in range(n)]


def run_direct(gen, clients, prompt_len, new) -> float:
  reqs = [
    GenerationRequest(_prompt(i, prompt_len), new, SamplingParams(greedy=True))
    for i in range(clients)
  ]
  t0 = time.perf_counter()
  results = [f.result() for f in [gen.submit(r) for r in reqs]]
  dt = time.perf_counter() - t0
  assert all(len(r.tokens) == new for r in results)
  return clients * new / dt


def run_http(url, clients, prompt_len, new, endpoint) -> float:
  start, done = threading.Barrier(clients + 1), []
  tok = ByteTokenizer()

  def one(i):
    c = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=600)
    kw = dict(model="bench", max_tokens=new, temperature=0, extra_body={"ignore_eos": True})
    start.wait()
    if endpoint == "chat":
      msgs = [{"role": "user", "content": tok.decode(_prompt(i, prompt_len))}]
      r = c.chat.completions.create(messages=msgs, **kw)
    else:
      r = c.completions.create(prompt=_prompt(i, prompt_len), **kw)
    done.append(r.usage.completion_tokens)

  threads = [threading.Thread(target=one, args=(i,)) for i in range(clients)]
  for t in threads:
    t.start()
  start.wait()
  t0 = time.perf_counter()
  for t in threads:
    t.join()
  dt = time.perf_counter() - t0
  assert done == [new] * clients, done
  return clients * new / dt


def main() -> None:
  ap = argparse.ArgumentParser()
  ap.add_argument("--clients", type=int, default=32)
  ap.add_argument("--prompt", type=int, default=64)
  ap.add_argument("--new", type=int, default=64)
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--warmup", type=int, default=2, help="untimed HTTP runs (compilation)")
  ap.add_argument("--endpoint", choices=["completions", "chat"], default="completions")
  args = ap.parse_args()
  cfg = config.qwen3_20m(n_layers=4, d_ff=2048, vocab_size=260, max_seq_len=256)
  params = tfm.init(cfg, jax.random.PRNGKey(0))
  engine = Engine(cfg, params, max_concurrent_decodes=args.clients, max_seq_len=256)
  tok = ByteTokenizer()
  gen = Generator(engine, tokenizer=tok)
  gw = Gateway(gen, tok, model_name="bench")
  srv = BackgroundServer(make_app(gw))
  try:
    # Warm-up: staggered HTTP arrivals make prefill batches of several sizes; compile them all.
    run_direct(gen, args.clients, args.prompt, args.new)
    for _ in range(args.warmup):
      run_http(srv.base_url(), args.clients, args.prompt, args.new, args.endpoint)
    direct, http = [], []
    before = gen.stats()
    for _ in range(args.repeats):
      direct.append(run_direct(gen, args.clients, args.prompt, args.new))
      http.append(run_http(srv.base_url(), args.clients, args.prompt, args.new, args.endpoint))
    after = gen.stats()
  finally:
    srv.close()
    gen.close()
  d, h = statistics.median(direct), statistics.median(http)
  steps = after["decode_steps"] - before["decode_steps"]
  toks = after["tokens_generated"] - before["tokens_generated"]
  print(json.dumps({
    "clients": args.clients, "prompt": args.prompt, "new": args.new, "endpoint": args.endpoint,
    "direct_tokens_per_s": round(d, 1), "http_tokens_per_s": round(h, 1),
    "http_over_direct": round(h / d, 3), "tokens_per_decode_step": round(toks / max(steps, 1), 2),
    "runs_direct": [round(x, 1) for x in direct], "runs_http": [round(x, 1) for x in http],
  }))  # fmt: skip


if __name__ == "__main__":
  main()
