"""Dockerfile syntax: logical instruction lines, build-time variable expansion, KEY=VALUE
arguments and the top-level split of a shell command (used by envs.formats.dockerfile)."""

from __future__ import annotations

import dataclasses
import posixpath
import re
import shlex
from collections.abc import Callable

from envs.formats.test_script import commands
from envs.task import TaskFormatError


class DockerfileError(TaskFormatError):
  """A Dockerfile step that cannot be replayed on the base image."""

  def __init__(self, file: str, line: int, text: str, cause: str):
    super().__init__(file, f"line {line}", f"{cause}\n    {line}: {text.strip()[:200]}")
    self.line = line


# BuildKit heredocs (`RUN <<EOF`, `COPY <<a.txt <<b.txt /dest/`, `<<-` and quoted delimiters);
# `<<<` is a here-string, not a heredoc. Only RUN, COPY and ADD take them, as in Docker.
_HEREDOC = re.compile(r"(?<!<)<<(?!<)(-?)[ \t]*(['\"]?)([A-Za-z_][\w.-]*)\2")
_HEREDOC_INSTRUCTIONS = ("RUN", "COPY", "ADD")


@dataclasses.dataclass(frozen=True)
class Heredoc:
  """One heredoc of an instruction: its name (a COPY source's file name), body and quoting."""

  name: str
  body: str  # each line ends with a newline; `<<-` has stripped leading tabs
  quoted: bool  # a quoted delimiter: no variable expansion


def _unquoted(line: str) -> list[bool]:
  """Per character of `line`: whether it is outside single or double quotes."""
  out, quote = [], None
  for c in line:
    out.append(quote is None)
    if quote is None and c in "'\"":
      quote = c
    elif c == quote:
      quote = None
  return out


def _markers(first: str) -> list[re.Match]:
  free = _unquoted(first)
  return [m for m in _HEREDOC.finditer(first) if free[m.start()]]


def _ends(line: str, m: re.Match) -> bool:
  return (line.lstrip("\t") if m.group(1) else line).strip() == m.group(3)


def logical_lines(text: str) -> list[tuple[int, str]]:
  """(first line number, instruction text) with continuations, comments and heredocs folded
  (an instruction's heredoc bodies and terminators follow its first line, as in a shell)."""
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
    takes = joined.split(None, 1)[0].upper() in _HEREDOC_INSTRUCTIONS
    for m in _markers(joined) if takes else ():
      body = []
      while i < len(lines) and not _ends(lines[i], m):
        body.append(lines[i])
        i += 1
      i += 1
      joined += "\n" + "".join(b + "\n" for b in body) + m.group(3)
    out.append((start, joined))
    buf = []
  if buf:
    out.append((start, " ".join(buf)))
  return out


def heredocs(instr: str) -> tuple[str, list[Heredoc]]:
  """A RUN/COPY/ADD's arguments folded by logical_lines: (first line, its heredocs in order)."""
  first, *rest = instr.split("\n")
  docs = []
  for m in _markers(first):
    body = []
    while rest and not _ends(rest[0], m):
      line = rest.pop(0)
      body.append((line.lstrip("\t") if m.group(1) else line) + "\n")
    rest = rest[1:]
    docs.append(Heredoc(m.group(3), "".join(body), bool(m.group(2))))
  return first, docs


def without_heredocs(first: str) -> str:
  """The first line of an instruction with its heredoc markers taken out."""
  return _HEREDOC.sub(" ", first).strip()


def heredoc_script(body: str, rewrite: Callable[[str], str]) -> str:
  """The replay of `RUN <<EOF`: BuildKit runs the body as a `/bin/sh -c` script (no `-e`: only
  its last command's status counts), or, with a `#!` line, as a file run by that interpreter.
  Its one-line commands go through `rewrite` (package installs); blocks stay verbatim."""
  if body.startswith("#!"):
    return (
      "f=$(mktemp) && cat > \"$f\" <<'__AGENTRL_HEREDOC__'\n"
      f"{body}__AGENTRL_HEREDOC__\n"
      'chmod +x "$f" && "$f"; rc=$?; rm -f "$f"; exit $rc'
    )
  cmds = [c if "\n" in c else rewrite(c) for _, c in commands(body)]
  return "set +e\n" + "\n".join(cmds) + "\n"


def ignored(patterns: list[str], path: str) -> bool:
  """Whether a build-context path is left out by .dockerignore lines (the last match decides;
  `!` re-includes; `**` matches any number of folders; a matched folder takes its contents)."""
  out = False
  for pat in patterns:
    neg = pat.startswith("!")
    rx = _ignore_regex(pat[1:] if neg else pat)
    if rx is not None and rx.match(path):
      out = not neg
  return out


def _ignore_regex(pat: str) -> re.Pattern | None:
  pat = posixpath.normpath(pat.strip().lstrip("/")) if pat.strip() else ""
  if not pat or pat == ".":
    return None
  rx = ""
  for part in re.split(r"(\*\*/?|\*|\?)", pat):
    if part.startswith("**"):
      rx += ".*"
    elif part == "*":
      rx += "[^/]*"
    elif part == "?":
      rx += "[^/]"
    else:
      rx += re.escape(part)
  return re.compile(rx + "(/.*)?$")


def dockerignore(text: str) -> list[str]:
  """The patterns of a .dockerignore file (comments and blank lines dropped)."""
  return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


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
