"""Demonstrations replayed in real bubblewrap sandboxes: the reference teacher keeps only what
the verifier passes; a noisy teacher (sft.teacher_accuracy < 1) replays the task's plausible
mistakes for a seeded share of tasks and keeps every demonstration with its grade."""

import dataclasses
import json

import jax
import numpy as np
import pytest

from envs import procedural
from envs.agents import agent, tool_format
from envs.episodes import SandboxEpisodes
from models import transformer
from models.config import tiny
from models.inference.engine import Engine
from models.inference.generator import Generator
from models.io.tokenizer import ByteTokenizer
from rl import warm_start

CFG = tiny("qwen3", vocab_size=260, d_model=32, n_heads=4, n_kv_heads=2, head_dim=8, d_ff=64)


@pytest.fixture(scope="module")
def episodes():
  tok = ByteTokenizer()
  params = jax.device_get(transformer.init(CFG, jax.random.key(0)))
  gen = Generator(Engine(CFG, params, max_concurrent_decodes=2, max_seq_len=256), tokenizer=tok)
  acfg = agent.AgentConfig(max_turns=2, max_new_tokens=96, max_context_tokens=256)
  yield tok, SandboxEpisodes(gen, tool_format.ChatFormat(tok, ""), acfg)
  gen.close()


def test_reference_and_noisy_teacher(episodes):
  tok, eps = episodes
  tasks = [procedural.generate("echo_word", s) for s in range(10)]
  ref = warm_start.demonstrations(tasks, eps, tok, workers=4)
  assert len(ref) == 10 and all(d["passed"] for d in ref)

  noisy = warm_start.demonstrations(tasks, eps, tok, workers=4, teacher_accuracy=0.3, seed=5)
  right = np.random.default_rng(5).random(10) < 0.3  # the same seeded draw as the teacher's
  assert 0 < right.sum() < 10  # both kinds occur with this seed
  assert len(noisy) == 10  # every demonstration kept, failed ones too
  for d, r, t in zip(noisy, right, tasks, strict=True):
    text = tok.decode([x for x, m in zip(d["tokens"], d["loss_mask"], strict=True) if m])
    mistakes = dict(t.metadata)["teacher_mistakes"]
    assert d["passed"] == bool(r)  # the verifier's grade: mistakes never pass
    said = [
      c for c in (t.solution_script.strip(), *mistakes) if f'"command": {json.dumps(c)}' in text
    ]
    if r:
      assert said == [t.solution_script.strip()]
    else:
      assert len(said) == 1 and said[0] in mistakes


def test_noisy_teacher_needs_mistakes(episodes):
  tok, eps = episodes
  task = procedural.generate("sort_unique", 0)
  with pytest.raises(ValueError, match=r"sort_unique-0 has no teacher_mistakes"):
    warm_start.demonstrations([task] * 4, eps, tok, workers=2, teacher_accuracy=0.01)


def test_markdown_bash_demonstrations(episodes):
  """agent.protocol=markdown_bash: one ```bash block ending with the sentinel, then EOS."""
  from envs.agents import markdown_bash as mb

  tok, _ = episodes
  acfg = agent.AgentConfig(
    max_turns=2, max_new_tokens=96, max_context_tokens=512, protocol="markdown_bash"
  )
  fmt = agent.make_format("markdown_bash", tok, "Reply with one bash block.")
  eps = SandboxEpisodes(None, fmt, acfg)
  tasks = [procedural.generate("echo_word", s) for s in range(4)]
  demos = warm_start.demonstrations(tasks, eps, tok, workers=2, protocol="markdown_bash")
  assert len(demos) == 4 and all(d["passed"] for d in demos)
  for d, t in zip(demos, tasks, strict=True):
    said = [x for x, m in zip(d["tokens"], d["loss_mask"], strict=True) if m]
    want = mb.format_action(f"{t.solution_script.strip()}\n{mb.SENTINEL}")
    assert said == tok.encode(want) + [tok.eos_id]


def test_look_then_act_demonstrations(episodes):
  """peek_twice / move_only (configs/smollm2_nodemo.py's D): two turns, the second command
  built from what the first one showed, verified in the sandbox; the observation (not a loss
  token) holds the word or file name the second action then uses."""
  from envs.agents import markdown_bash as mb

  tok, _ = episodes
  acfg = agent.AgentConfig(  # byte tokens: the longest act with its sentinel is ~100
    max_turns=3, max_new_tokens=160, max_context_tokens=640, protocol="markdown_bash"
  )
  eps = SandboxEpisodes(None, agent.make_format("markdown_bash", tok, "One bash block."), acfg)
  tasks = [procedural.generate(f, s) for f in ("peek_twice", "move_only") for s in range(2)]
  demos = warm_start.demonstrations(tasks, eps, tok, workers=2, protocol="markdown_bash")
  assert len(demos) == 4 and all(d["passed"] for d in demos)
  for d, t in zip(demos, tasks, strict=True):
    seen = t.workspace_files[0]  # the named file's word, or the named folder's one file
    peek = t.id.startswith("procedural/peek")
    shown = seen.data.decode().strip() if peek else seen.path.split("/", 1)[1]
    text = tok.decode(d["tokens"])
    said = tok.decode([x for x, m in zip(d["tokens"], d["loss_mask"], strict=True) if m])
    assert said.count("```bash") == 2 and said.count(mb.SENTINEL) == 1
    first, second = said.split("```bash")[1:]
    assert shown not in first and shown in second  # the act uses what the look showed
    assert text.index(shown) < text.index(second.strip()[:10])  # shown in an observation first


def test_write_file_as_a_shell_command(tmp_path):
  import subprocess

  content = 'it\'s a "test" $HOME `x`\n\tno trailing newline'
  call = tool_format.ToolCall("write_file", {"path": "sub dir/f.txt", "content": content})
  (tmp_path / "sub dir").mkdir()
  subprocess.run(["bash", "-c", warm_start.as_command(call)], cwd=tmp_path, check=True)
  assert (tmp_path / "sub dir/f.txt").read_text() == content
  finish = tool_format.ToolCall("finish", {})
  assert warm_start.as_command(finish) == ""


def test_a_failed_reference_is_replayed_once_then_named(episodes):
  """A reference that fails once (here: the first replay of one task is failed, as a sandbox
  hiccup would) is replayed and kept, so the demonstrations and every batch drawn from them
  stay the same; one that fails twice (a broken reference) is dropped with its task named."""
  tok, eps = episodes
  tasks = [procedural.generate("echo_word", s) for s in range(4)]
  broken = dataclasses.replace(tasks[3], solution_script="false")
  seen = []

  def flaky(task, *args, **kw):
    out = eps(task, *args, **kw)
    if task.id == tasks[1].id and task.id not in seen:
      seen.append(task.id)
      out = dataclasses.replace(out, passed=False, failure_mode="tests_failed")
    return out

  said = []
  demos = warm_start.demonstrations([*tasks[:3], broken], flaky, tok, workers=2, say=said.append)
  assert len(demos) == 3 and all(d["passed"] for d in demos)
  assert [(d["slot"], d["slots"]) for d in demos] == [(0, 4), (1, 4), (2, 4)]  # broken's is empty
  assert seen == [tasks[1].id]  # its first replay was failed; kept above, so it was replayed
  assert said == [f"[sft] no demonstration of {broken.id} (twice): the verifier failed the "
                  "reference (reward 0.0)"], said  # fmt: skip
