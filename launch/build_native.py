"""Build the native decode kernel (models/native/paged_attention.cc) with the C++ compiler.

  python -m launch.build_native          # launch/setup.sh runs it; a second run is a no-op

Writes models/inference/paged_attention.library_path() (named by a hash of the source and
flags, so an edited source is rebuilt and a stale library is never loaded). The engine loads
it on first use of `attention="paged_ffi"` and falls back to the gather path without it.
Prints the library's path last; exits 1 with the compiler's message if the build fails.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile


def build() -> str:
  """The kernel's path, compiled first if absent; RuntimeError if it cannot be."""
  import jax.ffi  # noqa: PLC0415 (a script: keep `--help`-speed imports out of the module)

  from models.inference import paged_attention  # noqa: PLC0415

  out = paged_attention.library_path()
  if out.exists():
    return str(out)
  cxx = shutil.which("c++") or shutil.which("g++")
  if cxx is None:
    raise RuntimeError("no C++ compiler (c++ or g++) to build the paged-attention kernel")
  out.parent.mkdir(exist_ok=True)
  with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
    so = os.path.join(tmp, out.name)
    cmd = [cxx, *paged_attention.FLAGS, f"-I{jax.ffi.include_dir()}", "-o", so,
           str(paged_attention.SOURCE)]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
      raise RuntimeError(f"building {out.name} failed:\n{r.stderr[-3000:]}")
    os.replace(so, out)  # atomic: a concurrent loader sees the old state or the whole file
  for old in out.parent.glob("paged_attention-*.so"):  # builds of older sources
    if old != out:
      old.unlink()  # a process that mapped it keeps its mapping
  return str(out)


def main() -> int:
  try:
    print(build())
  except RuntimeError as e:
    print(f"[build_native] {e}", file=sys.stderr)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
