r"""Speculative decoding with a *trained* target and draft (generate.py --speculative uses random
weights, whose greedy output mostly repeats one token).

  python benchmarks/speculative_trained.py [--target_steps=120] [--draft_steps=400] [--repeats=3]

Both models are trained here from scratch, on the same byte-level corpus: texts of procedural
tasks of several families (the instruction, then `$ ` and the reference command), joined by
<|endoftext|> and cut into rows. Target: the ~20M Qwen3-shaped config of generate.py (vocab
8192, width 512, 4 layers, GQA 8/2); draft: 1 layer, width 128. Then, on held-out task texts
(their first 64 bytes as the prompt, 128 new tokens, batch 1, greedy), the plain engine
(Generator, one slot) vs speculative decoding, in the same run: speedup, agreement (accepted /
proposed draft tokens) and whether the greedy output is identical.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))  # run from anywhere

import jax
import jax.numpy as jnp
import numpy as np
import optax
from generate import (  # benchmarks/generate.py (this folder)
  NEW,
  PROMPT,
  model,
  speculative_vs_plain,
)

from envs import procedural
from models import config
from models import sampling as smp
from models import transformer as tfm
from models.inference import speculative as spec
from models.inference.engine import Engine, unstack_layers
from models.inference.generator import GenerationRequest, Generator
from models.sampling import SamplingParams
from rl.losses import token_logprobs

FAMILIES = ("echo_word", "count_level", "sort_unique", "rename_ext", "json_select", "csv_sum")
EOT = 257  # <|endoftext|> of models.io.tokenizer.ByteTokenizer


def texts(seed0: int, n: int) -> list[str]:
  out = []
  for i in range(n):
    t = procedural.generate(FAMILIES[i % len(FAMILIES)], seed0 + i)
    out.append(f"{t.instruction}\n$ {t.solution_script.strip()}\n")
  return out


def corpus_rows(n_texts: int, row_len: int) -> np.ndarray:
  stream: list[int] = []
  for s in texts(0, n_texts):
    stream += list(s.encode()) + [EOT]
  n = len(stream) // row_len
  return np.asarray(stream[: n * row_len], np.int32).reshape(n, row_len)


def train(cfg, params, rows_NT, steps: int, lr: float, batch: int, seed: int):
  """Plain next-token cross-entropy with AdamW; returns (params, last loss)."""
  tx = optax.adamw(
    optax.warmup_cosine_decay_schedule(0.0, lr, min(10, steps - 1), max(steps, 2), lr * 0.1)
  )
  opt = tx.init(params)

  @jax.jit
  def step(params, opt, x_BT):
    def loss_fn(p):
      logp_BT, _ = token_logprobs(tfm.apply(p, x_BT, cfg), x_BT, with_entropy=False)
      return -jnp.mean(logp_BT[:, 1:])  # position 0 has no prediction

    loss, g = jax.value_and_grad(loss_fn)(params)
    upd, opt = tx.update(g, opt, params)
    return optax.apply_updates(params, upd), opt, loss

  rng = np.random.default_rng(seed)
  loss = float("nan")
  for _ in range(steps):
    idx = rng.choice(len(rows_NT), batch, replace=False)
    params, opt, loss = step(params, opt, jnp.asarray(rows_NT[idx]))
  return params, float(loss)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--target_steps", type=int, default=120)
  ap.add_argument("--draft_steps", type=int, default=400)
  ap.add_argument("--prompts", type=int, default=4)
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--ks", default="4,6")
  args = ap.parse_args()
  print(f"load average (1, 5, 15 min) at start: {os.getloadavg()}")
  rows = corpus_rows(3000, PROMPT + NEW)
  cfg, params = model()
  params, t_loss = train(cfg, params, rows, args.target_steps, 1e-3, 8, 0)
  dcfg = config.qwen3_20m(
    n_layers=1, d_model=128, n_heads=2, n_kv_heads=1, d_ff=256, max_seq_len=cfg.max_seq_len
  )
  dparams, d_loss = train(
    dcfg, tfm.init(dcfg, jax.random.PRNGKey(1)), rows, args.draft_steps, 3e-3, 16, 1
  )
  print(json.dumps({"target_loss_nats_per_byte": round(t_loss, 3), "draft_loss": round(d_loss, 3)}))
  held = texts(10**6, args.prompts)  # seeds far from the corpus's
  run_t, run_d = unstack_layers(params), unstack_layers(dparams)
  rows1 = jax.tree.map(jnp.asarray, smp.stack_params([SamplingParams(greedy=True)]))
  eng = Engine(cfg, params, max_concurrent_decodes=1, page_size=16, max_seq_len=PROMPT + NEW)
  with Generator(eng) as gen:
    for k in [int(k) for k in args.ks.split(",")]:
      res = []
      for text in held:
        ids = (list(text.encode()) + [EOT] * PROMPT)[:PROMPT]
        req = GenerationRequest(ids, NEW, SamplingParams(greedy=True))
        prompt = jnp.asarray([ids], jnp.int32)
        run = lambda prompt=prompt, k=k: spec.generate(
          run_t, run_d, prompt, rows1, target_cfg=cfg, draft_cfg=dcfg, max_new=NEW, k=k
        )
        row, plain = speculative_vs_plain(gen, req, run, k, args.repeats)
        res.append(
          dict(
            row,
            repeat_rate=float(np.mean(np.array(plain[1:]) == np.array(plain[:-1]))),
            sample=bytes(t for t in plain if t < 256).decode(errors="replace")[:60],
          )
        )
      print(
        json.dumps(
          {
            "k": k,
            "speedup_median": round(statistics.median(r["speedup"] for r in res), 3),
            "speedup_cpu_median": round(statistics.median(r["speedup_cpu"] for r in res), 3),
            "agreement_mean": round(float(np.mean([r["agreement"] for r in res])), 3),
            "identical_greedy": all(r["identical_greedy"] for r in res),
            "target_repeat_rate": round(float(np.mean([r["repeat_rate"] for r in res])), 3),
            "per_prompt": [
              {k2: (round(v, 3) if isinstance(v, float) else v) for k2, v in r.items()} for r in res
            ],
          }
        )
      )


if __name__ == "__main__":
  main()
