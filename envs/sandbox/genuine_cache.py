"""The host's cache of verified packages' members (genuine_pip.py, genuine_apt.py): one JSON
file per artifact, written whole or not at all, so a concurrent grader reads one or the other."""

from __future__ import annotations

import json
import os


def load(path: str) -> dict | None:
  """The members cached at `path`, None when absent or unreadable (then fetched again)."""
  try:
    with open(path) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def keep(path: str, members: dict) -> None:
  """Stores `members` at `path`; a host that cannot write it (a full disk) only loses the
  cache: the package is fetched again next time."""
  tmp = f"{path}.{os.getpid()}.tmp"
  try:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(tmp, "w") as f:
      json.dump(members, f)
    os.replace(tmp, path)
  except OSError:
    try:
      os.unlink(tmp)
    except OSError:
      pass
