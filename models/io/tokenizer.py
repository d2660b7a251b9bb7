"""Tokenizers: Hugging Face `tokenizers` + the checkpoint's jinja chat template, and a byte
tokenizer for tiny demos. Both satisfy the `Tokenizer` protocol.

Chat templates are rendered the way `transformers` renders them (sandboxed jinja2,
trim_blocks/lstrip_blocks, `raise_exception`, a `tojson` filter that keeps non-ASCII).
"""

from __future__ import annotations

import datetime
import functools
import json
import pathlib
import re
from collections.abc import Sequence
from typing import Any, Protocol

import jinja2
import jinja2.sandbox

from models.io.hf_config import CheckpointError


class Tokenizer(Protocol):
  vocab_size: int
  eos_id: int
  pad_id: int
  bos_id: int | None

  def encode(self, text: str) -> list[int]: ...

  def decode(self, ids: Sequence[int]) -> str: ...

  def apply_chat_template(self, messages, add_generation_prompt: bool = True) -> str: ...


def _raise(msg):
  raise jinja2.exceptions.TemplateError(msg)


@functools.lru_cache(maxsize=32)
def _compile(template: str) -> jinja2.Template:
  env = jinja2.sandbox.ImmutableSandboxedEnvironment(
    trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
  )
  env.filters["tojson"] = lambda x, indent=None, ensure_ascii=False, sort_keys=False: json.dumps(
    x, indent=indent, ensure_ascii=ensure_ascii, sort_keys=sort_keys
  )
  env.globals["raise_exception"] = _raise
  env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
  return env.from_string(template)


def render_chat(template: str, messages, add_generation_prompt: bool = True, **extra) -> str:
  """Renders a HF-style jinja chat template."""
  return _compile(template).render(
    messages=list(messages), add_generation_prompt=add_generation_prompt, **extra
  )


# ------------------------------------------------------------------ byte tokenizer

CHATML_TEMPLATE = (
  "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
  "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


class ByteTokenizer:
  """Ids 0-255 are bytes; then <|pad|>, <|endoftext|>, <|im_start|>, <|im_end|>.

  eos_id is <|im_end|> (the end of an assistant turn); `stop_ids` also holds <|endoftext|>.
  Special-token strings inside the text are encoded as their single ids.
  """

  SPECIALS = ("<|pad|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>")

  def __init__(self, chat_template: str = CHATML_TEMPLATE):
    self.chat_template = chat_template
    self._special_ids = {s: 256 + i for i, s in enumerate(self.SPECIALS)}
    self._split = re.compile("(" + "|".join(re.escape(s) for s in self.SPECIALS) + ")")
    self.vocab_size = 256 + len(self.SPECIALS)
    self.pad_id = self._special_ids["<|pad|>"]
    self.eos_id = self._special_ids["<|im_end|>"]
    self.bos_id = None
    self.stop_ids = (self.eos_id, self._special_ids["<|endoftext|>"])

  def encode(self, text: str) -> list[int]:
    ids: list[int] = []
    for part in self._split.split(text):
      if part in self._special_ids:
        ids.append(self._special_ids[part])
      else:
        ids.extend(part.encode("utf-8"))
    return ids

  def decode(self, ids: Sequence[int]) -> str:
    out, buf = [], bytearray()
    for i in ids:
      i = int(i)
      if 0 <= i < 256:
        buf.append(i)
        continue
      out.append(buf.decode("utf-8", errors="replace"))
      buf = bytearray()
      idx = i - 256
      out.append(self.SPECIALS[idx] if 0 <= idx < len(self.SPECIALS) else "\ufffd")
    out.append(buf.decode("utf-8", errors="replace"))
    return "".join(out)

  def apply_chat_template(self, messages, add_generation_prompt: bool = True, **extra) -> str:
    return render_chat(self.chat_template, messages, add_generation_prompt, **extra)


# ------------------------------------------------------------------ HF tokenizer


def _token_str(value: Any) -> str | None:
  if isinstance(value, dict):
    return value.get("content")
  return value


def _first_id(value: Any) -> int | None:
  if isinstance(value, list):
    return int(value[0]) if value else None
  return None if value is None else int(value)


class HFTokenizer:
  """A `tokenizers.Tokenizer` plus special tokens and the checkpoint's chat template."""

  def __init__(
    self,
    tok,
    *,
    chat_template: str | None = None,
    bos_token: str | None = None,
    eos_token: str | None = None,
    pad_token: str | None = None,
    extra_stop_ids: Sequence[int] = (),
  ):
    self._tok = tok
    self.chat_template = chat_template
    self.bos_token, self.eos_token = bos_token, eos_token
    self.vocab_size = tok.get_vocab_size(with_added_tokens=True)
    self.bos_id = tok.token_to_id(bos_token) if bos_token else None
    eos = tok.token_to_id(eos_token) if eos_token else None
    stops = [i for i in [eos, *extra_stop_ids] if i is not None]
    if not stops:
      raise ValueError(
        "tokenizer has no eos token (tokenizer_config.json eos_token or "
        "generation_config.json eos_token_id)"
      )
    self.eos_id = stops[0]
    self.stop_ids = tuple(dict.fromkeys(stops))
    pad = tok.token_to_id(pad_token) if pad_token else None
    self.pad_id = self.eos_id if pad is None else pad  # common practice when no pad exists

  @classmethod
  def from_dir(cls, path) -> HFTokenizer:
    """Reads tokenizer.json, tokenizer_config.json, chat_template.jinja, generation_config.json."""
    import tokenizers

    path = pathlib.Path(path)
    tok_file = path / "tokenizer.json"
    if not tok_file.is_file():
      raise CheckpointError(f"{tok_file}: missing (a HF fast-tokenizer file is required)")
    try:
      tok = tokenizers.Tokenizer.from_file(str(tok_file))
    except Exception as e:  # the library raises a bare Exception on bad JSON
      raise CheckpointError(f"{tok_file}: cannot parse: {e}") from e
    tcfg = _read_json(path / "tokenizer_config.json")
    gen = _read_json(path / "generation_config.json")
    template = tcfg.get("chat_template")
    if isinstance(template, list):  # named templates: take 'default'
      template = {t["name"]: t["template"] for t in template}.get("default")
    jinja_file = path / "chat_template.jinja"
    if jinja_file.is_file():
      template = jinja_file.read_text()
    gen_eos = gen.get("eos_token_id")
    extra = gen_eos if isinstance(gen_eos, list) else [] if gen_eos is None else [gen_eos]
    return cls(
      tok,
      chat_template=template,
      bos_token=_token_str(tcfg.get("bos_token")),
      eos_token=_token_str(tcfg.get("eos_token")),
      pad_token=_token_str(tcfg.get("pad_token")),
      extra_stop_ids=extra,
    )

  def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
    """Token ids; special tokens are added only if asked (chat templates already hold them)."""
    return self._tok.encode(text, add_special_tokens=add_special_tokens).ids

  def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str:
    return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)

  def apply_chat_template(self, messages, add_generation_prompt: bool = True, **extra) -> str:
    if self.chat_template is None:
      raise ValueError(
        "this checkpoint has no chat template (tokenizer_config.json "
        "chat_template or chat_template.jinja)"
      )
    extra.setdefault("bos_token", self.bos_token or "")
    extra.setdefault("eos_token", self.eos_token or "")
    return render_chat(self.chat_template, messages, add_generation_prompt, **extra)


def _read_json(file: pathlib.Path) -> dict:
  if not file.is_file():
    return {}
  try:
    return json.loads(file.read_text())
  except json.JSONDecodeError as e:
    raise CheckpointError(f"{file}: invalid JSON: {e}") from e


# ------------------------------------------------------------------ small BPE for from-scratch runs


def train_bpe(texts, vocab_size: int, chat_template: str = CHATML_TEMPLATE) -> HFTokenizer:
  """A byte-level BPE trained with `tokenizers` on `texts` (e.g. a task family's transcripts).

  For policies trained from scratch (the CPU demo): words become a few tokens instead of one
  byte each, so sequences are several times shorter and copying a name is a few token copies.
  Specials and eos/pad/stop ids are those of `ByteTokenizer` (ChatML).
  """
  import tokenizers
  from tokenizers import decoders, models, pre_tokenizers, trainers

  tok = tokenizers.Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
    vocab_size=vocab_size,
    special_tokens=list(ByteTokenizer.SPECIALS),
    initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    show_progress=False,
  )
  tok.train_from_iterator(texts, trainer)
  return HFTokenizer(
    tok,
    chat_template=chat_template,
    eos_token="<|im_end|>",
    pad_token="<|pad|>",
    extra_stop_ids=[tok.token_to_id("<|endoftext|>")],
  )


def save_tokenizer(tok: HFTokenizer, path) -> None:
  """Writes tokenizer.json + tokenizer_config.json so `HFTokenizer.from_dir` reads it back."""
  path = pathlib.Path(path)
  path.mkdir(parents=True, exist_ok=True)
  tok._tok.save(str(path / "tokenizer.json"))
  cfg = {
    "chat_template": tok.chat_template,
    "eos_token": tok.eos_token,
    "pad_token": tok._tok.id_to_token(tok.pad_id),
    "bos_token": tok.bos_token,
  }
  (path / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))
  stops = [int(i) for i in tok.stop_ids]
  (path / "generation_config.json").write_text(json.dumps({"eos_token_id": stops}))
