"""OpenAI-compatible gateway over the engine that records token-exact episodes for RL.

`Gateway` (service) is the core, `make_app` / `BackgroundServer` (server) the HTTP layer,
`EpisodeCapture` / `assemble` (capture) turn an episode's calls into the agent's trajectory.
"""

from envs.gateway.capture import Call, EpisodeCapture, assemble
from envs.gateway.protocol import RequestError
from envs.gateway.server import BackgroundServer, make_app
from envs.gateway.service import Gateway

__all__ = [
  "BackgroundServer",
  "Call",
  "EpisodeCapture",
  "Gateway",
  "RequestError",
  "assemble",
  "make_app",
]
