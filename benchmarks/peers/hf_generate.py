r"""transformers' `generate` (PyTorch, CPU) on our toy shapes: the engine rows' second peer.

  echo 1 8 32 | python benchmarks/peers/hf_generate.py --shape=JSON [--concurrency=1,8,32]

A Qwen3ForCausalLM with random weights built from --shape (our ModelConfig's fields), fp32,
greedy, prompt 64 + exactly 128 new tokens (min_new_tokens = max_new_tokens), static batches
with the default dynamic KV cache. torch uses this machine's cores (its default threads).
Serves interleaved runs (common.serve): after one warm-up call per concurrency, one timed
generate per concurrency read from stdin, a JSON row each.
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

  def run(c):
    ids = torch.tensor(common.prompt_ids(shape["vocab_size"], c, args.prompt, c))
    kw = dict(
      max_new_tokens=args.new, min_new_tokens=args.new, do_sample=False, pad_token_id=0,
      attention_mask=torch.ones_like(ids),
    )  # fmt: skip
    with torch.inference_mode():
      out, wall_s, cpu_s = common.timed_once(lambda: model.generate(ids, **kw))
    return common.throughput_row(
      "transformers", "generate", c, args.new, wall_s, cpu_s,
      new_tokens=int(out.shape[1] - args.prompt), torch_threads=torch.get_num_threads(),
      versions={"torch": torch.__version__, "transformers": transformers.__version__},
    )  # fmt: skip

  common.serve({str(c): lambda c=c: run(c) for c in common.concurrencies(args.concurrency)})


if __name__ == "__main__":
  main()
