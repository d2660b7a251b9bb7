"""Dockerfile syntax: logical instruction lines, build-time variable expansion, KEY=VALUE
arguments and the top-level split of a shell command (used by envs.formats.dockerfile)."""

from __future__ import annotations

import re
import shlex

from envs.task import TaskFormatError


class DockerfileError(TaskFormatError):
  """A Dockerfile step that cannot be replayed on the base image."""

  def __init__(self, file: str, line: int, text: str, cause: str):
    super().__init__(file, f"line {line}", f"{cause}\n    {line}: {text.strip()[:200]}")
    self.line = line


def logical_lines(text: str) -> list[tuple[int, str]]:
  """(first line number, instruction text) with continuations, comments and heredocs folded."""
  out, buf, start = [], [], 0
  lines = text.splitlines()
  i = 0
  while i < len(lines):
    line = lines[i]
    i += 1
    if not buf and (not line.strip() or line.lstrip().startswith("#")):
      continue
    if buf and line.lstrip().startswith("#"):
      continue
    if not buf:
      start = i
    if line.rstrip().endswith("\\"):
      buf.append(line.rstrip()[:-1])
      continue
    buf.append(line)
    joined = " ".join(buf)  # Docker drops the escaped newline of a continuation
    heredoc = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", joined)
    if heredoc and joined.split(None, 1)[0].upper() == "RUN":
      end = heredoc.group(1)
      body = []
      while i < len(lines) and lines[i].strip() != end:
        body.append(lines[i])
        i += 1
      i += 1
      joined = joined + "\n" + "\n".join(body) + "\n" + end
    out.append((start, joined))
    buf = []
  if buf:
    out.append((start, " ".join(buf)))
  return out


def expand(value: str, env: dict[str, str]) -> str:
  """$VAR, ${VAR} and ${VAR:-default} as Docker expands them at build time."""

  def sub(m: re.Match) -> str:
    if m.group(3):
      return env.get(m.group(3), "")
    return env.get(m.group(1), m.group(2) or "")

  return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)", sub, value)


def parse_kv(args: str, file: str, line: int, text: str) -> list[tuple[str, str]]:
  toks = shlex.split(args)
  if not toks:
    raise DockerfileError(file, line, text, "missing arguments")
  if "=" not in toks[0]:
    return [(toks[0], " ".join(toks[1:]))]
  pairs = []
  for t in toks:
    if "=" not in t:
      raise DockerfileError(file, line, text, f"expected KEY=VALUE, got {t!r}")
    k, v = t.split("=", 1)
    pairs.append((k, v))
  return pairs


def split_segments(cmd: str) -> list[str]:
  """Splits a shell command on top-level &&, ||, ; and newlines, keeping the operators."""
  out, cur, i, quote = [], [], 0, None
  while i < len(cmd):
    c = cmd[i]
    if quote:
      cur.append(c)
      if c == "\\" and quote == '"' and i + 1 < len(cmd):
        cur.append(cmd[i + 1])
        i += 1
      elif c == quote:
        quote = None
    elif c in "'\"":
      quote = c
      cur.append(c)
    elif c == "\\" and i + 1 < len(cmd):
      cur.extend(cmd[i : i + 2])
      i += 1
    elif cmd.startswith("&&", i) or cmd.startswith("||", i):
      out += ["".join(cur), cmd[i : i + 2]]
      cur = []
      i += 1
    elif c in ";\n":
      out += ["".join(cur), ";"]
      cur = []
    else:
      cur.append(c)
    i += 1
  out.append("".join(cur))
  return out
