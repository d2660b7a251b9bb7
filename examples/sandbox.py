"""The README's sandbox snippet, runnable: exec, write a file, snapshot/restore, a pool.

python examples/sandbox.py [bwrap|docker]
"""

import sys

from envs import sandbox
from envs.sandbox.pool import PoolConfig, SandboxPool


def main(backend: str = "bwrap") -> None:
  spec = sandbox.SandboxSpec(memory_mb=1024, pids=256, disk_mb=512, exec_timeout_s=30)
  with sandbox.make(backend, spec) as sb:
    sb.write_file("a.py", "print(1)")
    r = sb.exec("python3 a.py", timeout_s=60)  # ExecResult(exit_code, stdout, stderr, ...)
    assert (r.exit_code, r.stdout.strip()) == (0, "1"), r
    snap = sb.snapshot()
    sb.exec("rm a.py")
    sb.restore(snap)  # byte-identical
    assert sb.exec("cat a.py").stdout == "print(1)"
  with SandboxPool(spec, PoolConfig(backend=backend, min_idle=1, max_live=2)) as pool:
    with pool.sandbox() as sb:
      print("pool sandbox:", sb.exec("echo ok").stdout.strip())
  print(f"{backend}: exec, write_file, snapshot/restore and a pool work")


if __name__ == "__main__":
  main(*sys.argv[1:])
