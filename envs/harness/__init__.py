"""External agent harnesses in our sandboxes, sampling through the gateway (envs.gateway).

`HarnessAgent` (external) runs any `harness(base_url, runner, instruction)` as an agent of the
one protocol, `ExternalEpisodes` is the one episode runner over it, and `SandboxRunner`
(runner) is the command runner a harness gets. The mini-swe-agent integration lives in
`envs.harness.mini_swe` (imported on demand: it needs mini-swe-agent).
"""

from envs.harness.external import ExternalEpisodes, HarnessAgent, resolve_harness
from envs.harness.runner import SandboxRunner

__all__ = ["ExternalEpisodes", "HarnessAgent", "SandboxRunner", "resolve_harness"]
