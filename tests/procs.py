"""Long-lived test subprocesses that die with the test process.

A pytest worker killed from outside (the OOM killer, a CI timeout) would leave a training run,
a server or a Ray cluster behind, holding memory and ports while the suite goes on;
`setpriv --pdeathsig KILL` makes the kernel SIGKILL the child when its parent dies. The child
execs in place, so its pid is the one the test sees.
"""


def with_parent(cmd: list[str]) -> list[str]:
  return ["setpriv", "--pdeathsig", "KILL", "--", *cmd]
