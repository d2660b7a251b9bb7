"""models.io.tokenizer.ByteTokenizer and the load-and-generate demo (launch/generate_demo.py)."""

import pathlib
import subprocess
import sys

import jax
import numpy as np

from models import config, transformer
from models.io import hf
from models.io.tokenizer import ByteTokenizer, render_chat


def test_byte_tokenizer_round_trip_and_specials():
  tok = ByteTokenizer()
  text = "<|im_start|>user\nhé 🙂<|im_end|>\n"
  ids = tok.encode(text)
  assert ids[0] == 258 and ids[-2] == 259 and ids[-1] == ord("\n")
  assert ids[1:5] == list(b"user") and tok.decode(ids) == text
  assert list("hé".encode()) == ids[6:9]
  assert (tok.vocab_size, tok.eos_id, tok.pad_id, tok.bos_id) == (260, 259, 256, None)
  assert tok.decode([0xF0, 0x9F]) == "\ufffd"  # a cut multi-byte char does not raise
  assert tok.decode([999]) == "\ufffd"


def test_byte_tokenizer_chat_template():
  tok = ByteTokenizer()
  msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
  assert tok.apply_chat_template(msgs, add_generation_prompt=False) == (
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nyo<|im_end|>\n"
  )
  assert tok.apply_chat_template(msgs[:1]).endswith("<|im_start|>assistant\n")


def test_template_helpers_match_transformers_conventions():
  tpl = "{{ messages | tojson }}{% if x %}{{ raise_exception('bad') }}{% endif %}"
  assert (
    render_chat(tpl, [{"role": "user", "content": "é"}]) == '[{"role": "user", "content": "é"}]'
  )
  try:
    render_chat(tpl, [], x=True)
    raise AssertionError("raise_exception did not raise")
  except Exception as e:  # jinja2 TemplateError
    assert "bad" in str(e)


def test_demo_greedy_tokens_are_argmaxes(tmp_path):
  from launch import generate_demo

  generate_demo.build_tiny_checkpoint(str(tmp_path), seed=1)
  cfg, params = hf.load(tmp_path)
  prompt = ByteTokenizer().encode("abc")
  new = generate_demo.greedy_generate(params, cfg, prompt, 5)
  seq = np.array([prompt + new])
  logits = np.asarray(transformer.apply(params, seq, cfg))
  assert new == [int(np.argmax(logits[0, t - 1])) for t in range(3, 8)]
  assert config.num_params(cfg) == sum(p.size for p in jax.tree.leaves(params))


def test_demo_entry_point_runs(tmp_path):
  out = subprocess.run(
    [
      sys.executable,
      "-m",
      "launch.generate_demo",
      f"--workdir={tmp_path}",
      "--max_new_tokens=2",
      "--chat",
    ],
    capture_output=True,
    text=True,
    timeout=300,
    check=True,
    cwd=pathlib.Path(__file__).resolve().parents[1],
  )
  assert "generated ids:" in out.stdout and (tmp_path / "model.safetensors").is_file()


def test_trained_bpe_round_trip_save_load_and_experiment_spec(tmp_path):
  import pytest

  from envs import procedural
  from envs.agents import tool_format
  from models.io.tokenizer import HFTokenizer, save_tokenizer, train_bpe
  from rl.runtime.replica import load_tokenizer

  tasks = [procedural.generate("echo_word", s) for s in range(300)]
  texts = [t.instruction for t in tasks] + [t.solution_script for t in tasks]
  tok = train_bpe(texts, 300)
  assert tok.vocab_size == 300
  assert (tok.pad_id, tok.eos_id, tok.stop_ids) == (0, 3, (3, 1))  # ChatML specials first
  text = "<|im_start|>user\nCreate a file named bamisu.txt, é 🙂<|im_end|>\n"
  ids = tok.encode(text)
  assert tok.decode(ids) == text and ids[0] == 2 and 3 in ids
  words = tok.encode(tasks[0].instruction)
  assert len(words) < len(tasks[0].instruction.encode()) / 2  # merges learned from the corpus
  # Token-exact copying: a name reads the same in the instruction and in the command.
  script = tasks[0].solution_script.strip()
  name, cmd = script.split("> ")[1], tool_format.format_tool_call("shell", command=script)
  assert " ".join(map(str, tok.encode(" " + name))) in " ".join(map(str, tok.encode(cmd)))

  save_tokenizer(tok, tmp_path / "t")
  back = HFTokenizer.from_dir(tmp_path / "t")
  assert back.encode(text) == ids and back.stop_ids == tok.stop_ids and back.pad_id == 0
  msgs = [{"role": "user", "content": "hi"}]
  assert back.apply_chat_template(msgs) == tok.apply_chat_template(msgs)

  calls = []
  spec = load_tokenizer("bpe:280", tmp_path / "wd", lambda: calls.append(1) or texts)
  again = load_tokenizer("bpe:280", tmp_path / "wd", lambda: calls.append(1) or texts)
  assert calls == [1] and spec.vocab_size == again.vocab_size == 280  # trained once, read back
  assert (tmp_path / "wd" / "tokenizer" / "tokenizer.json").is_file()
  with pytest.raises(ValueError, match="bpe:<vocab size>"):
    load_tokenizer("bpe:many", tmp_path / "wd", lambda: texts)
