"""External agent harnesses in our sandboxes, sampling through the gateway (envs.gateway).

`ExternalEpisodes` (external) runs any `harness(base_url, runner, instruction)` per episode
and grades it; `SandboxRunner` (runner) is the command runner it gets. The mini-swe-agent
integration lives in `envs.harness.mini_swe` (imported on demand: it needs mini-swe-agent).
"""

from envs.harness.external import ExternalEpisodes, ExternalOutcome, resolve_harness
from envs.harness.runner import SandboxRunner

__all__ = ["ExternalEpisodes", "ExternalOutcome", "SandboxRunner", "resolve_harness"]
