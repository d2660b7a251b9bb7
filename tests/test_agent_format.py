"""Pure parts of the agent loop: tool-call parsing, observation formatting, chat-template deltas."""

import json

import pytest

from envs.agents import tool_format
from models.io.tokenizer import ByteTokenizer


@pytest.mark.parametrize(
  "text,name,args",
  [
    (
      '<tool_call>{"name": "shell", "arguments": {"command": "ls -la"}}</tool_call>',
      "shell",
      {"command": "ls -la"},
    ),
    (
      'thinking first\n<tool_call>{"name": "write_file", "arguments": {"path": "a b.txt", '
      '"content": "x\\ny"}}</tool_call>',
      "write_file",
      {"path": "a b.txt", "content": "x\ny"},
    ),
    ('<tool_call>{"name": "finish", "arguments": {}}</tool_call>', "finish", {}),
    ('<tool_call>{"name": "finish"}</tool_call>', "finish", {}),
  ],
)
def test_parse_valid(text, name, args):
  call = tool_format.parse_tool_call(text)
  assert call.name == name and call.arguments == args


@pytest.mark.parametrize(
  "text,needle",
  [
    ("ls -la", "no tool call"),
    ('<tool_call>{"name": "shell", "arguments": {"command": "ls"}}', "not closed"),
    ('<tool_call>{"name": "shell", "arguments": {"command": "ls"}</tool_call>', "not valid JSON"),
    ('<tool_call>["shell"]</tool_call>', "JSON object"),
    ('<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', "unknown tool 'rm_rf'"),
    ('<tool_call>{"name": "shell", "arguments": {}}</tool_call>', "missing arguments ['command']"),
    (
      '<tool_call>{"name": "shell", "arguments": {"command": "ls", "x": "1"}}</tool_call>',
      "unexpected arguments ['x']",
    ),
    ('<tool_call>{"name": "shell", "arguments": {"command": 3}}</tool_call>', "must be strings"),
    ('<tool_call>{"name": "shell", "arguments": "ls"}</tool_call>', "must be a JSON object"),
  ],
)
def test_parse_malformed_names_the_problem(text, needle):
  with pytest.raises(tool_format.ToolCallError, match=None) as e:
    tool_format.parse_tool_call(text)
  assert needle in str(e.value)


def test_format_tool_call_round_trips():
  text = tool_format.format_tool_call("write_file", path="x.txt", content='he said "hi"\n')
  assert text.startswith(tool_format.TOOL_CALL_OPEN) and text.endswith(tool_format.TOOL_CALL_CLOSE)
  call = tool_format.parse_tool_call(text)
  assert call.arguments == {"path": "x.txt", "content": 'he said "hi"\n'}
  assert (
    json.loads(text[len(tool_format.TOOL_CALL_OPEN) : -len(tool_format.TOOL_CALL_CLOSE)])["name"]
    == "write_file"
  )


def test_truncate_middle_keeps_head_and_tail_with_marker():
  text = "".join(chr(ord("a") + i % 26) for i in range(1000))
  out = tool_format.truncate_middle(text, 100)
  assert out.startswith(text[:50]) and out.endswith(text[-50:])
  assert "[... 900 chars truncated ...]" in out
  assert tool_format.truncate_middle("short", 100) == "short"


def test_exec_observation_format():
  assert tool_format.format_exec_observation(0, "hi\n", "") == "exit code: 0\nstdout:\nhi"
  assert tool_format.format_exec_observation(124, "", "boom", timed_out=True) == (
    "exit code: 124 (timed out)\nstderr:\nboom"
  )


def test_chat_format_deltas_equal_full_render_token_for_token():
  """prompt + action + observation tokens == tokens of the whole conversation rendered at once."""
  tok = ByteTokenizer()
  fmt = tool_format.ChatFormat(tok, system_prompt="sys")
  action = tool_format.format_tool_call("shell", command="echo hi")
  obs = "exit code: 0\nstdout:\nhi"
  tokens = fmt.prompt("do it") + tok.encode(action) + fmt.observation(obs)
  msgs = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": "do it"},
    {"role": "assistant", "content": action},
    {"role": "tool", "content": obs},
  ]
  assert tokens == tok.encode(tok.apply_chat_template(msgs, add_generation_prompt=True))


def test_chat_format_after_stop_token_is_not_doubled():
  tok = ByteTokenizer()
  fmt = tool_format.ChatFormat(tok, system_prompt="")
  plain = fmt.observation("o")
  after = fmt.observation("o", after_stop=tok.eos_id)
  assert plain[0] == tok.eos_id and after == plain[1:]


def test_chat_format_falls_back_to_user_role_without_tool_role():
  strict = (
    "{% for m in messages %}{% if m['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('bad role') }}{% endif %}<|im_start|>{{ m['role'] }}\n"
    "{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
  )
  fmt = tool_format.ChatFormat(ByteTokenizer(chat_template=strict), system_prompt="")
  assert fmt.tool_role == "user"
  text = ByteTokenizer().decode(fmt.observation("result"))
  assert "<tool_response>\nresult\n</tool_response>" in text and text.endswith("assistant\n")
