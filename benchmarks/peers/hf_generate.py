r"""transformers' `generate` (PyTorch, CPU) on our toy shapes: the engine rows' second peer.

  python benchmarks/peers/hf_generate.py --shape=JSON [--concurrency=1,8,32] [--repeats=3]

A Qwen3ForCausalLM with random weights built from --shape (our ModelConfig's fields), fp32,
greedy, prompt 64 + exactly 128 new tokens (min_new_tokens = max_new_tokens), static batches
with the default dynamic KV cache. torch uses this machine's cores (its default threads).
Prints one JSON object per concurrency.
"""

from __future__ import annotations

import common
import torch
import transformers


def build(shape: dict):
  cfg = transformers.Qwen3Config(
    **common.peer_fields(shape, "transformers"), max_position_embeddings=2048
  )
  torch.manual_seed(0)
  return transformers.Qwen3ForCausalLM(cfg).eval()


def main():
  args, shape = common.parse(common.arg_parser(description=__doc__))
  model = build(shape)
  for c in common.concurrencies(args.concurrency):
    ids = torch.tensor(common.prompt_ids(shape["vocab_size"], c, args.prompt, c))
    kw = dict(
      max_new_tokens=args.new, min_new_tokens=args.new, do_sample=False, pad_token_id=0,
      attention_mask=torch.ones_like(ids),
    )  # fmt: skip
    with torch.inference_mode():
      wall_s, cpu_s, out = common.timed(
        lambda ids=ids, kw=kw: model.generate(ids, **kw), args.repeats
      )
    common.throughput_row(
      "transformers", "generate", c, args.new, wall_s, cpu_s,
      new_tokens=int(out.shape[1] - args.prompt), torch_threads=torch.get_num_threads(),
      versions={"torch": torch.__version__, "transformers": transformers.__version__},
    )  # fmt: skip


if __name__ == "__main__":
  main()
