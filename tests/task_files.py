"""Writes a task folder (or any tree of small text files) for a test, from {path: text}."""

import pathlib
import textwrap


def write(root: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
  """Each text is dedented and loses its leading blank lines; returns `root`."""
  for rel, text in files.items():
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(textwrap.dedent(text).lstrip("\n"))
  return root
