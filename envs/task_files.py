"""Reading a task folder's files: the tree (no links, size-capped), the link check, TOML, and
the error every loader raises (`TaskFormatError`, naming the file and the field)."""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Iterable

try:
  import tomllib
except ModuleNotFoundError:  # Python 3.10
  import tomli as tomllib

_MAX_FILE_BYTES = 8 << 20


class TaskFormatError(ValueError):
  """A malformed task: the message names the file and the field."""

  def __init__(self, file: str | pathlib.Path, field: str, cause: str):
    self.file, self.field, self.cause = str(file), field, cause
    super().__init__(f"{file}: field '{field}': {cause}")


@dataclasses.dataclass(frozen=True)
class FileEntry:
  """One file of a task, relative to the folder it will be copied into."""

  path: str
  data: bytes
  mode: int = 0o644


Files = tuple[FileEntry, ...]


def read_tree(root: pathlib.Path, skip: Iterable[str] = ()) -> Files:
  """Reads every regular file under `root` (sorted, relative paths, modes kept)."""
  skip = set(skip)
  out = []
  if root.is_symlink():
    raise TaskFormatError(root, "path", "symlinks are not allowed in a task folder")
  if not root.is_dir():
    return ()
  for p in sorted(root.rglob("*")):
    rel = p.relative_to(root).as_posix()
    if rel in skip or any(part == "__pycache__" for part in p.parts):
      continue
    if p.is_symlink():
      raise TaskFormatError(p, "path", "symlinks are not allowed in a task folder")
    if p.is_file():
      if p.stat().st_size > _MAX_FILE_BYTES:
        raise TaskFormatError(p, "size", f"file larger than {_MAX_FILE_BYTES} bytes")
      out.append(FileEntry(rel, p.read_bytes(), 0o755 if p.stat().st_mode & 0o111 else 0o644))
  return tuple(out)


def check_links(root: pathlib.Path) -> None:
  """Refuses a task folder that holds a symbolic link anywhere (TaskFormatError naming it): the
  loaders, the Dockerfile replay, the verifier and the exporters read nothing through a link,
  so no file outside the folder (a root-only host file) reaches a task, a sandbox or a report."""
  base = root.resolve()
  for dirpath, dirs, files in os.walk(root):  # os.walk does not follow folder links
    for name in sorted(dirs + files):
      p = pathlib.Path(dirpath, name)
      if not p.is_symlink():
        continue
      try:
        inside = p.resolve().is_relative_to(base)
      except (OSError, RuntimeError):  # a link loop
        inside = False
      where = "inside" if inside else "outside"
      raise TaskFormatError(
        p, "path", f"is a symbolic link (to {where} the task folder); task folders hold no links"
      )


def read_toml(path: pathlib.Path) -> dict:
  try:
    return tomllib.loads(path.read_text())
  except tomllib.TOMLDecodeError as e:
    raise TaskFormatError(path, "<syntax>", f"invalid TOML: {e}") from None
  except UnicodeDecodeError as e:
    raise TaskFormatError(path, "<encoding>", f"not UTF-8: {e}") from None
