"""The host side of a Docker container's writable layer (overlay2, a local daemon, host root).

overlay2 on ext4 ignores `storage_opt size`, so the layer folder of a container (its diff/
and work/, which must share one filesystem) gets a tmpfs of `disk_mb` mounted over it after
create and before start: the writable root is then capped like bwrap's upper layer, and the
host's disk does not grow at all. The same folder is read host-side for the system
fingerprint (system_guard.py), so no tool inside the container is trusted for it.
"""

from __future__ import annotations

import os
import pathlib
import subprocess

from envs.sandbox import system_guard
from envs.sandbox.base import SandboxError

_SIZED = {"btrfs", "zfs", "devicemapper", "windowsfilter"}
_CAPS: dict[str, bool] = {}


def driver_caps_layer(api) -> bool:
  """Whether the daemon's storage driver enforces `storage_opt size` on a writable layer
  (overlay2 only on xfs with project quotas); asked once per daemon."""
  key = str(getattr(api, "base_url", ""))
  if key not in _CAPS:
    try:
      info = api.info()
    except Exception:  # noqa: BLE001 (no answer: treat as uncapped, the tmpfs applies)
      return False
    driver = info.get("Driver", "")
    backing = dict(info.get("DriverStatus") or []).get("Backing Filesystem", "")
    _CAPS[key] = driver in _SIZED or (driver == "overlay2" and backing == "xfs")
  return _CAPS[key]


def upper_dir(api, cid: str) -> pathlib.Path | None:
  """The container's UpperDir on this host, None when the daemon's layers are not ours."""
  try:
    graph = api.inspect_container(cid)["GraphDriver"]
  except Exception:  # noqa: BLE001 (gone: nothing to read)
    return None
  upper = (graph.get("Data") or {}).get("UpperDir")
  if graph.get("Name") != "overlay2" or not upper or os.geteuid() != 0:
    return None
  p = pathlib.Path(upper)
  return p if p.is_dir() else None


def _mounted(d: pathlib.Path) -> bool:
  return any(line.split()[4] == str(d) for line in open("/proc/self/mountinfo"))


def cap_layer(api, cid: str, size_bytes: int) -> pathlib.Path | None:
  """Mounts a `size_bytes` tmpfs over the (created, not started) container's layer folder,
  carrying its files over; returns the folder, None where the layer is not on this host."""
  upper = upper_dir(api, cid)
  if upper is None:
    return None
  d = upper.parent
  below = os.open(d, os.O_RDONLY | os.O_DIRECTORY)  # the folder under the mount, for the copy
  try:
    opts = f"size={size_bytes},mode=0700"
    r = subprocess.run(
      ["mount", "-t", "tmpfs", "-o", opts, "agentrl-layer", str(d)], capture_output=True
    )
    if r.returncode != 0:
      raise SandboxError(f"could not cap the container's layer: {r.stderr.decode()[-300:]}")
    cp = subprocess.run(
      ["cp", "-a", f"/proc/self/fd/{below}/.", f"{d}/"], capture_output=True, pass_fds=(below,)
    )
    if cp.returncode != 0:
      release_layer(d)
      raise SandboxError(f"could not fill the capped layer: {cp.stderr.decode()[-300:]}")
  finally:
    os.close(below)
  return d


def release_layer(d: pathlib.Path | None) -> None:
  """Unmounts the tmpfs (the container is stopped or removed); the folder below is Docker's."""
  if d is not None and _mounted(d):
    subprocess.run(["umount", "-l", str(d)], capture_output=True)


def layers(api, cid: str) -> tuple[str, tuple[str, ...]] | None:
  """(UpperDir, LowerDirs top first) of the container, None when not on this host."""
  upper = upper_dir(api, cid)
  if upper is None:
    return None
  data = api.inspect_container(cid)["GraphDriver"].get("Data") or {}
  return str(upper), tuple(d for d in (data.get("LowerDir") or "").split(":") if d)


def fingerprint(api, cid: str) -> dict[str, str]:
  """system_guard's fingerprint of the container's writable layer (the daemon's diff when the
  layer is not on this host: paths and change kinds only)."""
  found = layers(api, cid)
  if found is not None:
    return system_guard.fingerprint(*found)
  try:
    changes = api.diff(cid) or []
  except Exception as e:  # noqa: BLE001
    raise SandboxError(f"docker could not list the container's changes: {e}") from e
  out = {}
  for c in changes:
    rel = c["Path"].lstrip("/")
    if system_guard.protected(rel) and not rel.endswith(".pyc") and "/__pycache__" not in rel:
      out[rel] = f"kind{c['Kind']}"
  return out


def userns_remapped(api) -> bool:
  """Whether the daemon runs with userns-remap (uid 0 in a container is not the host's)."""
  try:
    return any("name=userns" in o for o in api.info().get("SecurityOptions") or [])
  except Exception:  # noqa: BLE001
    return False


def host_uids(api, cid: str) -> set[int]:
  """The host uids of the container's processes (a local daemon; empty where not)."""
  out = set()
  for row in api.top(cid, ps_args="-o pid")["Processes"] or []:
    try:
      status = pathlib.Path(f"/proc/{int(row[0])}/status").read_text()
    except OSError:
      continue
    out |= {int(ln.split()[1]) for ln in status.splitlines() if ln.startswith("Uid:")}
  return out
