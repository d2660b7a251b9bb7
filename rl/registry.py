"""Name -> function registries, so advantages, losses, KL estimators and aggregations are
chosen by a string in config (and new ones added with a decorator)."""

from __future__ import annotations

from collections.abc import Callable


class Registry:
  """A named table of functions; `get` raises naming the config field and the known names."""

  def __init__(self, kind: str, field: str):
    self.kind, self.field, self._fns = kind, field, {}

  def register(self, name: str) -> Callable:
    def deco(fn):
      if name in self._fns:
        raise ValueError(f"{self.kind} {name!r} is already registered")
      self._fns[name] = fn
      return fn

    return deco

  def get(self, name: str) -> Callable:
    if name not in self._fns:
      raise ValueError(f"{self.field}: unknown {self.kind} {name!r}; known: {sorted(self._fns)}")
    return self._fns[name]

  def names(self) -> list[str]:
    return sorted(self._fns)

  def __contains__(self, name: str) -> bool:
    return name in self._fns


ADVANTAGES = Registry("advantage estimator", "LossConfig.advantage")
POLICY_LOSSES = Registry("policy loss", "LossConfig.policy_loss")
KL_ESTIMATORS = Registry("KL estimator", "LossConfig.kl")
AGGREGATIONS = Registry("loss aggregation", "LossConfig.aggregation")
