"""The engine and the update step on the real SmolLM2-135M-Instruct (30 layers, fp32, CPU).

Every figure is a ratio measured in this run:
  engine/hf    Generator end to end (submit -> all results, prefill included) vs transformers'
               `generate` on the same weights, fp32, batch 1 / 8 / 32, greedy and sampled,
               random prompt of --prompt tokens, --new new tokens (both after a warm-up pass);
               --repeats interleaved pairs, medians and the pairs' spread
  decode/bound decode tokens/s of the jitted step at 32 slots as a fraction of the bound set by
               the matmul FLOP/s measured in this process (a 2048^3 fp32 matmul)
  first token  Engine(...) -> first token of a request, in fresh subprocesses: cold (empty
               persistent compilation cache), then warm (the cache the cold run filled)
  update       the GRPO update (rl.train_step) at --update_batch x --update_len, AdamW: achieved
               FLOP/s / matmul peak and peak RSS, in a subprocess (remat, micro-batches as given)
  layout       decode compile s and tok/s, unrolled layers vs a scan (--parts layout only)
  engine/tunix Generator vs Tunix 0.1.7's Sampler (benchmarks/peers/tunix_llama.py in the venv
               setup_tunix.sh makes) on the same HF folder, greedy, same random prompts
The weights: --model (an HF folder) or, by default, the named checkpoint
`smollm2-135m-instruct` (models.io.checkpoints: converted once into $AGENTRL_CACHE/models).

  python benchmarks/real_model.py [--quick] [--parts hf,decode,first_token,update,tunix,layout]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import math
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere


def model_dir(arg: str | None) -> pathlib.Path:
  """--model, or the named checkpoint `smollm2-135m-instruct` (converted once, models.io.checkpoints)."""
  from models.io import checkpoints

  return pathlib.Path(arg) if arg else checkpoints.resolve("smollm2-135m-instruct")


def matmul_peak(n: int = 2048, reps: int = 5) -> float:
  """Best fp32 matmul FLOP/s of reps runs (the least disturbed by other load)."""
  import jax
  import jax.numpy as jnp

  a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
  f = jax.jit(jnp.matmul)
  jax.block_until_ready(f(a, a))
  best = 0.0
  for _ in range(reps):
    t = time.perf_counter()
    jax.block_until_ready(f(a, a))
    best = max(best, 2 * n**3 / (time.perf_counter() - t))
  return best


def matmul_params(cfg) -> int:
  from models import transformer

  shapes = transformer.param_shapes(cfg)["layers"]
  n = sum(math.prod(s) for k, s in shapes.items() if k[0] == "w")
  return n + cfg.vocab_size * cfg.d_model  # + the LM head


def decode_flops_per_token(cfg, ctx: int) -> float:
  return 2 * matmul_params(cfg) + 4 * cfg.n_layers * cfg.n_heads * cfg.head_dim * ctx


# ------------------------------------------------------------------ engine vs transformers


def engine_run(eng, prompts, new, sampled):
  from models.inference.generator import GenerationRequest, Generator
  from models.sampling import SamplingParams

  def samp(i):
    return SamplingParams(temperature=1.0, seed=i) if sampled else SamplingParams(greedy=True)

  reqs = [GenerationRequest(p, new, samp(i)) for i, p in enumerate(prompts)]
  with Generator(eng, max_prefill_batch=len(prompts)) as gen:
    gen.generate(reqs)  # warm-up: compiles this batch's variants
    t = time.perf_counter()
    res = gen.generate(reqs)
    dt = time.perf_counter() - t
  assert all(len(r.tokens) == new for r in res)
  return len(prompts) * new / dt, res


def hf_run(model, prompts, new, sampled):
  import torch

  ids = torch.tensor(prompts)
  kw = dict(do_sample=sampled, pad_token_id=0, attention_mask=torch.ones_like(ids))
  if sampled:
    kw.update(temperature=1.0, top_k=0, top_p=1.0)
  with torch.no_grad():
    model.generate(ids, max_new_tokens=4, min_new_tokens=4, **kw)  # warm-up
    t = time.perf_counter()
    out = model.generate(ids, max_new_tokens=new, min_new_tokens=new, **kw)
    dt = time.perf_counter() - t
  assert out.shape[1] == len(prompts[0]) + new
  return len(prompts) * new / dt


def part_hf(args, path, report):
  import numpy as np
  import torch
  import transformers

  from models.inference.engine import Engine
  from models.io import hf

  cfg, params = hf.load(path)
  model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
  rng = np.random.default_rng(0)
  for B in args.batches:
    prompts = rng.integers(0, cfg.vocab_size, (B, args.prompt)).tolist()
    eng = Engine(cfg, params, max_concurrent_decodes=B, max_seq_len=args.prompt + args.new)
    for sampled in (False, True):
      # Interleaved pairs, medians: one timed run per side swung 2x at batch 1 between runs
      # 45 minutes apart (issue 39), so the spread of the pairs is printed with the ratio.
      es, hs = [], []
      for _ in range(args.repeats):
        es.append(engine_run(eng, prompts, args.new, sampled)[0])
        hs.append(hf_run(model, prompts, args.new, sampled))
      ratios = [e / h for e, h in zip(es, hs, strict=True)]
      e, h, r = (float(np.median(x)) for x in (es, hs, ratios))
      kind = "sampled" if sampled else "greedy"
      report[f"engine_vs_hf/{kind}/b{B}"] = dict(
        engine_tok_s=e, hf_tok_s=h, ratio=r, engine_runs=es, hf_runs=hs, pair_ratios=ratios
      )
      print(f"batch {B:>2} {kind:>7}: engine {e:7.1f} tok/s, transformers {h:7.1f} tok/s, "
            f"ratio {r:.2f} (median of {len(ratios)} pairs, {min(ratios):.2f}-{max(ratios):.2f}; "
            f"engine {min(es):.1f}-{max(es):.1f}, transformers {min(hs):.1f}-{max(hs):.1f})",
            flush=True)  # fmt: skip
    del eng


def part_decode(args, path, report):
  """The jitted decode step alone at S slots (each with a prompt cached) vs the FLOP bound."""
  import jax
  import numpy as np

  from models.inference.engine import Engine
  from models.io import hf

  cfg, params = hf.load(path)
  S, chunk = args.decode_slots, 8
  eng = Engine(cfg, params, max_concurrent_decodes=S, max_seq_len=args.prompt + args.new)
  state = eng.init_decode_state()
  toks = np.random.default_rng(1).integers(0, cfg.vocab_size, (S, args.prompt))
  pre = eng.prefill(padded_tokens=toks, true_length=np.full(S, args.prompt))
  M = eng.pages_per_slot
  rows = 1 + np.arange(S * M).reshape(S, M)
  state = eng.insert(pre, state, np.arange(S), rows)
  pages = eng.attention_pages(args.prompt + args.new)
  state, out = eng.generate(None, state, pages=pages, steps=chunk)
  jax.block_until_ready(out)
  peak0, times = matmul_peak(), []
  for _ in range(args.new // chunk - 1):
    t = time.perf_counter()
    state, out = eng.generate(None, state, pages=pages, steps=chunk)
    jax.block_until_ready(out)
    times.append(time.perf_counter() - t)
  peak = max(peak0, matmul_peak())
  tok_s = S * chunk / sorted(times)[len(times) // 2]
  ctx = args.prompt + args.new // 2
  flop_tok = decode_flops_per_token(cfg, ctx)
  bound = peak / flop_tok
  report["decode"] = dict(slots=S, tok_s=tok_s, peak_gflop_s=peak / 1e9, bound_tok_s=bound,
                          fraction=tok_s / bound)  # fmt: skip
  print(f"decode at {S} slots: {tok_s:.1f} tok/s; matmul peak {peak / 1e9:.1f} GFLOP/s -> bound "
        f"{bound:.1f} tok/s ({flop_tok / 1e6:.0f} MFLOP/token); fraction {tok_s / bound:.2f}",
        flush=True)  # fmt: skip


def part_tunix(args, path, report):
  """Engine vs Tunix's Sampler (its own venv and Llama3 model) on the same weights, greedy."""
  import numpy as np

  from models.inference.engine import Engine
  from models.io import hf

  setup = subprocess.run(["bash", str(ROOT / "benchmarks/peers/setup_tunix.sh")],
                         capture_output=True, text=True)  # fmt: skip
  if setup.returncode:
    raise RuntimeError(f"setup_tunix.sh failed:\n{setup.stderr[-2000:]}")
  py = setup.stdout.strip().splitlines()[-1]
  cmd = [py, str(ROOT / "benchmarks/peers/tunix_llama.py"), "--model", str(path),
         "--concurrency", ",".join(map(str, args.tunix_batches)), "--prompt", str(args.prompt),
         "--new", str(args.new)]  # fmt: skip
  out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
  if out.returncode:
    raise RuntimeError(f"tunix_llama.py failed:\n{out.stderr[-3000:]}")
  rows = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
  cfg, params = hf.load(path)
  for row in rows:
    c = row["concurrency"]
    prompts = np.random.default_rng(c).integers(1, cfg.vocab_size, (c, args.prompt)).tolist()
    eng = Engine(cfg, params, max_concurrent_decodes=c, max_seq_len=args.prompt + args.new)
    e, res = engine_run(eng, prompts, args.new, sampled=False)
    same = res[0].tokens == row["first_tokens"]
    report[f"engine_vs_tunix/b{c}"] = dict(engine_tok_s=e, tunix_tok_s=row["tok_s"],
                                           ratio=e / row["tok_s"], same_greedy_tokens=same,
                                           tunix_first_call_s=row["first_call_s"])  # fmt: skip
    print(f"batch {c:>2} greedy: engine {e:7.1f} tok/s, tunix {row['tok_s']:7.1f} tok/s, ratio "
          f"{e / row['tok_s']:.2f}; same greedy tokens: {same}", flush=True)  # fmt: skip
    del eng


def part_layout(args, path, report):
  """Decode layer layout: unrolled per-layer weights (the engine's) vs a lax.scan over the
  stacked ones, one step at 1 and --decode_slots slots: compile s and tok/s, same process."""
  import jax
  import numpy as np

  from models.inference import engine_steps
  from models.inference.engine import Engine
  from models.io import hf

  cfg, params = hf.load(path)
  for S in sorted({1, args.decode_slots}):
    eng = Engine(cfg, params, max_concurrent_decodes=S, max_seq_len=args.prompt + args.new)
    for name, p in (("unrolled", eng.run_params), ("scan", eng.scan_params)):
      state = eng.init_decode_state()
      toks = np.random.default_rng(1).integers(0, cfg.vocab_size, (S, args.prompt))
      pre = eng.prefill(padded_tokens=toks, true_length=np.full(S, args.prompt))
      rows = 1 + np.arange(S * eng.pages_per_slot).reshape(S, -1)
      state = eng.insert(pre, state, np.arange(S), rows)
      fn = jax.jit(engine_steps.decode_fn, static_argnames=("cfg",), donate_argnums=(1,))
      t = time.perf_counter()
      exe = fn.lower(p, state, cfg=cfg).compile()
      comp = time.perf_counter() - t
      state, o = exe(p, state)
      times = []
      for _ in range(8):
        t = time.perf_counter()
        state, o = jax.block_until_ready(exe(p, state))
        times.append(time.perf_counter() - t)
      tok_s = S / sorted(times)[len(times) // 2]
      report[f"layout/{name}/s{S}"] = dict(compile_s=comp, tok_s=tok_s)
      print(f"decode layout {name:>8} at {S:>2} slots: compile {comp:5.1f} s, {tok_s:6.1f} tok/s",
            flush=True)  # fmt: skip
    del eng


# ------------------------------------------------------------------ subprocess parts


def child_first_token(args, path):
  import numpy as np

  from models.inference.engine import Engine
  from models.inference.generator import GenerationRequest, Generator
  from models.io import hf

  cfg, params = hf.load(path)
  prompt = np.random.default_rng(2).integers(0, cfg.vocab_size, args.prompt).tolist()
  t = time.perf_counter()
  eng = Engine(cfg, params, max_concurrent_decodes=8, max_seq_len=args.prompt + args.new)
  with Generator(eng) as gen:
    gen.submit(GenerationRequest(prompt, 1)).result()
    first = time.perf_counter() - t
  print(json.dumps(dict(first_token_s=first)))


def child_update(args, path):
  import jax

  spec = importlib.util.spec_from_file_location(
    "train_step_bench", ROOT / "benchmarks" / "train_step.py"
  )
  ts = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(ts)  # its make_batch and step_flops (the same FLOP count)
  make_batch, step_flops = ts.make_batch, ts.step_flops
  from models.io import hf_config
  from parallel.mesh import MeshConfig, make_mesh
  from rl.config import OptimConfig, TrainConfig
  from rl.train_state import create_train_state
  from rl.train_step import make_train_step

  cfg = hf_config.config_from_hf(json.loads((path / "config.json").read_text()))
  cfg = dataclasses.replace(cfg, remat=args.remat)
  tcfg = TrainConfig(
    optim=OptimConfig(lr=1e-5, warmup_steps=10, decay_steps=1000),
    mesh=MeshConfig(fsdp=-1), micro_batches=args.micro_batches,
  )  # fmt: skip
  mesh = make_mesh(tcfg.mesh)
  B, T = args.update_batch, args.update_len
  batch = make_batch(cfg, B, T, group=4)
  state, shardings = create_train_state(cfg, tcfg, mesh, jax.random.key(0))
  step = make_train_step(cfg, tcfg, mesh, shardings, batch)
  t = time.perf_counter()
  state, m = jax.block_until_ready(step(state, batch))
  first = time.perf_counter() - t
  times = []
  for _ in range(args.update_steps):
    t = time.perf_counter()
    state, m = jax.block_until_ready(step(state, batch))
    times.append(time.perf_counter() - t)
  peak = matmul_peak()
  dt = sorted(times)[len(times) // 2]
  flops = step_flops(cfg, B, T)
  rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB -> GiB
  print(json.dumps(dict(step_s=dt, first_step_s=first, gflop_s=flops / dt / 1e9,
                        peak_gflop_s=peak / 1e9, fraction=flops / dt / peak, peak_rss_gib=rss,
                        loss=float(m["loss"]))))  # fmt: skip


def run_child(part, argv, env=None) -> dict:
  cmd = [sys.executable, __file__, "--child", part, *argv]
  out = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
  if out.returncode:
    raise RuntimeError(f"{part} subprocess failed:\n{out.stderr[-3000:]}")
  return json.loads(out.stdout.strip().splitlines()[-1])


def part_first_token(args, argv, report):
  with tempfile.TemporaryDirectory() as cache:
    env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=cache)
    cold = run_child("first_token", argv, env)["first_token_s"]
    warm = run_child("first_token", argv, env)["first_token_s"]
  report["first_token"] = dict(cold_s=cold, warm_s=warm, ratio=cold / warm)
  print(f"Engine(...) -> first token: cold {cold:.1f} s, warm cache {warm:.1f} s "
        f"(cold / warm {cold / warm:.1f})", flush=True)  # fmt: skip


def part_update(args, argv, report):
  r = run_child("update", argv)
  report["update"] = r
  print(f"update {args.update_batch} x {args.update_len} (remat {args.remat}, micro-batches "
        f"{args.micro_batches}): {r['step_s']:.1f} s/step (first {r['first_step_s']:.1f} s), "
        f"{r['gflop_s']:.1f} GFLOP/s = {r['fraction']:.2f} of peak {r['peak_gflop_s']:.1f}; "
        f"peak RSS {r['peak_rss_gib']:.2f} GiB", flush=True)  # fmt: skip


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument(
    "--model", default=None, help="HF folder (default: the smollm2-135m-instruct checkpoint)"
  )
  ap.add_argument("--quick", action="store_true", help="small settings (smoke run)")
  ap.add_argument("--parts", default="hf,decode,first_token,update")
  ap.add_argument("--batches", default="1,8,32")
  ap.add_argument("--tunix_batches", default="1,32")
  ap.add_argument("--prompt", type=int, default=256)
  ap.add_argument("--new", type=int, default=128)
  ap.add_argument("--repeats", type=int, default=3, help="hf part: interleaved timed pairs")
  ap.add_argument("--decode_slots", type=int, default=32)
  ap.add_argument("--update_batch", type=int, default=32)
  ap.add_argument("--update_len", type=int, default=256)
  ap.add_argument("--update_steps", type=int, default=2)
  ap.add_argument("--remat", default="full", choices=["none", "full", "save_dots"])
  ap.add_argument("--micro_batches", type=int, default=4)
  ap.add_argument("--json", default=None, help="also write the figures here")
  ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.quick and not args.child:  # children get the settings spelled out
    args.batches, args.prompt, args.new, args.decode_slots = "1,8", 64, 32, 8
    args.update_batch, args.update_len, args.update_steps = 8, 128, 1
  args.batches = [int(b) for b in args.batches.split(",")]
  args.tunix_batches = [int(b) for b in args.tunix_batches.split(",")]
  path = model_dir(args.model)
  if args.child == "first_token":
    return child_first_token(args, path)
  if args.child == "update":
    return child_update(args, path)
  argv = ["--model", str(path), "--prompt", str(args.prompt), "--new", str(args.new)]
  argv += ["--update_batch", str(args.update_batch), "--update_len", str(args.update_len)]
  argv += ["--update_steps", str(args.update_steps), "--remat", args.remat]
  argv += ["--micro_batches", str(args.micro_batches)]
  load = " ".join(f"{x:.1f}" for x in os.getloadavg())
  print(f"when: {time.strftime('%Y-%m-%d %H:%M:%S')}  load average: {load}  cpus: "
        f"{os.cpu_count()}  model: {path.name}  prompt {args.prompt}, new {args.new}", flush=True)  # fmt: skip
  report = dict(load_before=load, args={k: v for k, v in vars(args).items() if k != "child"})
  parts = args.parts.split(",")
  local = (("hf", part_hf), ("tunix", part_tunix), ("decode", part_decode), ("layout", part_layout))
  for name, fn in local:
    if name in parts:
      fn(args, path, report)
  for name, fn in (("first_token", part_first_token), ("update", part_update)):
    if name in parts:
      fn(args, argv, report)
  report["load_after"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
  print(f"load average after: {report['load_after']}")
  if args.json:
    pathlib.Path(args.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
  main()
