"""Multi-host JAX start-up: `jax.distributed.initialize` from absl flags or the environment.

Every process of a multi-host job runs the same program and calls
`initialize_from_flags_or_env()` before touching a device. Each setting is taken from the
first place that has it:

  1. keyword arguments,
  2. absl flags (`define_flags()`; --coordinator, --num_processes, --process_id, ...),
  3. AGENTRL_* environment variables,
  4. JAX's own variables (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID,
     JAX_LOCAL_DEVICE_IDS, JAX_COORDINATOR_BIND_ADDRESS).

  setting            flag                   environment
  coordinator        --coordinator          AGENTRL_COORDINATOR         host:port of process 0
  num_processes      --num_processes        AGENTRL_NUM_PROCESSES
  process_id         --process_id           AGENTRL_PROCESS_ID          0 .. num_processes-1
  local_device_ids   --local_device_ids     AGENTRL_LOCAL_DEVICE_IDS    "0,1" (GPU per process)
  cpu_devices        --cpu_devices          AGENTRL_CPU_DEVICES         CPU devices per process
  bind_address       --coordinator_bind     AGENTRL_COORDINATOR_BIND    where process 0 listens
  cluster_detect     --cluster_detect       AGENTRL_CLUSTER_DETECT=1    TPU pod / SLURM / MPI

Nothing set means one process and no initialization (the embedded default). With only
`cluster_detect`, JAX finds the cluster itself (TPU pods, SLURM, Open MPI, GKE). A loopback
coordinator (127.0.0.1 / localhost) also binds the coordinator service to loopback, so a
one-machine job never listens on other interfaces; JAX's default binds every interface.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
from collections.abc import Mapping

import jax
from absl import flags

_FIELDS = {  # field -> (flag name, AGENTRL variable, JAX variable)
  "coordinator": ("coordinator", "AGENTRL_COORDINATOR", "JAX_COORDINATOR_ADDRESS"),
  "num_processes": ("num_processes", "AGENTRL_NUM_PROCESSES", "JAX_NUM_PROCESSES"),
  "process_id": ("process_id", "AGENTRL_PROCESS_ID", "JAX_PROCESS_ID"),
  "local_device_ids": ("local_device_ids", "AGENTRL_LOCAL_DEVICE_IDS", "JAX_LOCAL_DEVICE_IDS"),
  "cpu_devices": ("cpu_devices", "AGENTRL_CPU_DEVICES", None),
  "bind_address": ("coordinator_bind", "AGENTRL_COORDINATOR_BIND", "JAX_COORDINATOR_BIND_ADDRESS"),
  "cluster_detect": ("cluster_detect", "AGENTRL_CLUSTER_DETECT", None),
}


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
  """Where this process sits in a multi-process job (None = not set)."""

  coordinator: str | None = None
  num_processes: int | None = None
  process_id: int | None = None
  local_device_ids: tuple[int, ...] | None = None
  cpu_devices: int | None = None
  bind_address: str | None = None
  cluster_detect: bool = False
  timeout_s: int = 300

  @property
  def multi_process(self) -> bool:
    return self.cluster_detect or (self.num_processes or 1) > 1 or self.coordinator is not None


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
  """Defines the flags of the table in the module docstring (once; safe to call again)."""
  specs = (
    (flags.DEFINE_string, "coordinator", "host:port of process 0's coordinator service."),
    (flags.DEFINE_integer, "num_processes", "Number of processes in the job."),
    (flags.DEFINE_integer, "process_id", "Index of this process, 0 .. num_processes-1."),
    (flags.DEFINE_string, "local_device_ids", "Comma-separated local device ids to use."),
    (flags.DEFINE_integer, "cpu_devices", "Number of CPU devices per process (CPU backend)."),
    (flags.DEFINE_string, "coordinator_bind", "Address process 0's coordinator listens on."),
    (flags.DEFINE_bool, "cluster_detect", "Let JAX detect the cluster (TPU, SLURM, MPI)."),
  )
  for define, name, help_ in specs:
    if name not in flag_values:
      define(name, None, help_, flag_values=flag_values)


def _parse(field: str, raw, source: str):
  try:
    if field in ("num_processes", "process_id", "cpu_devices"):
      return int(raw)
    if field == "local_device_ids":
      return tuple(int(x) for x in str(raw).split(",") if x.strip())
    if field == "cluster_detect":
      return raw if isinstance(raw, bool) else str(raw).lower() in ("1", "true", "yes")
    return str(raw)
  except ValueError as e:
    raise ValueError(f"distributed setting {field} from {source}: cannot parse {raw!r}") from e


def resolve(
  flag_values: flags.FlagValues | None = None, environ: Mapping[str, str] | None = None, **kw
) -> DistributedConfig:
  """Merges keyword arguments, flags and environment (that order wins) into a config."""
  environ = os.environ if environ is None else environ
  out = {}
  for field, (flag, ours, theirs) in _FIELDS.items():
    candidates = [(kw.get(field), "argument")]
    if flag_values is not None and flag in flag_values and flag_values.is_parsed():
      candidates.append((flag_values[flag].value, f"--{flag}"))
    candidates += [(environ.get(v), f"${v}") for v in (ours, theirs) if v]
    raw, source = next(((r, s) for r, s in candidates if r not in (None, "")), (None, None))
    if raw is not None:
      out[field] = _parse(field, raw, source)
  if "timeout_s" in kw:
    out["timeout_s"] = int(kw["timeout_s"])
  return _validated(DistributedConfig(**out))


def _validated(cfg: DistributedConfig) -> DistributedConfig:
  if cfg.cluster_detect or not cfg.multi_process:
    return cfg
  missing = [f for f in ("coordinator", "num_processes", "process_id") if getattr(cfg, f) is None]
  if missing:
    raise ValueError(
      f"multi-process JAX needs coordinator, num_processes and process_id; missing {missing} "
      "(set them with flags or AGENTRL_* variables, or set AGENTRL_CLUSTER_DETECT=1)"
    )
  if not 0 <= cfg.process_id < cfg.num_processes:
    raise ValueError(f"process_id {cfg.process_id} not in [0, num_processes={cfg.num_processes})")
  if ":" not in cfg.coordinator:
    raise ValueError(f"coordinator {cfg.coordinator!r} must be host:port")
  return cfg


def _is_loopback(host: str) -> bool:
  if host == "localhost":
    return True
  try:
    return ipaddress.ip_address(host.strip("[]")).is_loopback
  except ValueError:
    return False


def _bind_address(cfg: DistributedConfig) -> str | None:
  if cfg.bind_address or cfg.coordinator is None:
    return cfg.bind_address
  host, port = cfg.coordinator.rsplit(":", 1)
  return f"{'127.0.0.1' if host == 'localhost' else host}:{port}" if _is_loopback(host) else None


def initialize(cfg: DistributedConfig) -> DistributedConfig:
  """Applies `cfg`: CPU device count, then `jax.distributed.initialize` if multi-process.

  Must run before the first JAX computation (the CPU device count and the distributed
  client are fixed when the backend starts). Calling it again is a no-op.
  """
  if cfg.cpu_devices is not None:
    jax.config.update("jax_num_cpu_devices", cfg.cpu_devices)
  if not cfg.multi_process or jax.distributed.is_initialized():
    return cfg
  if cfg.cluster_detect and cfg.coordinator is None:
    jax.distributed.initialize(initialization_timeout=cfg.timeout_s)
    return cfg
  jax.distributed.initialize(
    coordinator_address=cfg.coordinator,
    num_processes=cfg.num_processes,
    process_id=cfg.process_id,
    local_device_ids=list(cfg.local_device_ids) if cfg.local_device_ids else None,
    initialization_timeout=cfg.timeout_s,
    coordinator_bind_address=_bind_address(cfg),
  )
  return cfg


def initialize_from_flags_or_env(
  flag_values: flags.FlagValues | None = None, environ: Mapping[str, str] | None = None, **kw
) -> DistributedConfig:
  """`initialize(resolve(...))`: the one call a multi-host entry point makes first.

  Example (two processes on one machine, 4 CPU devices each):
    AGENTRL_COORDINATOR=127.0.0.1:12345 AGENTRL_NUM_PROCESSES=2 AGENTRL_PROCESS_ID=0 \\
      AGENTRL_CPU_DEVICES=4 python -m launch.train ...   # and PROCESS_ID=1 for the other
  """
  if flag_values is None and "coordinator" in flags.FLAGS and flags.FLAGS.is_parsed():
    flag_values = flags.FLAGS
  return initialize(resolve(flag_values, environ, **kw))
