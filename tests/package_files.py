"""Tiny real packages for the tamper scan's genuine-package tests: a wheel, a .deb (built with
dpkg-deb) and a flat apt repository with its Packages index."""

from __future__ import annotations

import hashlib
import pathlib
import subprocess
import zipfile

INIT = b"VALUE = 42\n"
APT_PTH = "usr/lib/python3/dist-packages/tinydeb-precedence.pth"
PTH = b"import os; var = 'X'; os.environ.get(var)\n"


def wheel(folder: pathlib.Path, name: str = "tinypkg", init: bytes = INIT) -> pathlib.Path:
  """A pure-Python wheel NAME 0.1 with NAME/__init__.py = `init` and a .data/purelib file."""
  info = f"{name}-0.1.dist-info"
  files = {
    f"{name}/__init__.py": init,
    f"{name}-0.1.data/purelib/{name}_extra.py": b"EXTRA = 1\n",
    f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n".encode(),
    f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
    b"Tag: py3-none-any\n",
  }
  record = "".join(
    f"{n},sha256={hashlib.sha256(d).hexdigest()},{len(d)}\n" for n, d in files.items()
  )
  files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
  folder.mkdir(parents=True, exist_ok=True)
  path = folder / f"{name}-0.1-py3-none-any.whl"
  with zipfile.ZipFile(path, "w") as z:
    for n, data in files.items():
      z.writestr(n, data)
  return path


TOOL = b"#!/bin/sh\necho genuine tool\n"
CONFFILE, CONF = "etc/ld.so.conf.d/tinydeb.conf", b"# tinydeb: no library folder\n"
POSTINST = (
  '#!/bin/sh\nset -e\nif [ "$1" = configure ]; then\n'
  "  update-alternatives --install /usr/bin/tinyalt tinyalt /usr/lib/tinydeb/tool 10\nfi\n"
)


def apt_repo(repo: pathlib.Path, version: str = "1.0") -> pathlib.Path:
  """A flat apt repository `repo` with tinydeb VERSION: /usr/lib/tinydeb/tool, a link
  /usr/lib/tinydeb/link -> tool, the conffile CONFFILE and, made by its postinst, the
  alternative /usr/bin/tinyalt."""
  pkg = repo.parent / f"tinydeb-{version}"
  (pkg / "DEBIAN").mkdir(parents=True)
  (pkg / "usr/lib/tinydeb").mkdir(parents=True)
  (pkg / "usr/lib/tinydeb/tool").write_bytes(TOOL)
  (pkg / "usr/lib/tinydeb/tool").chmod(0o755)
  (pkg / "usr/lib/tinydeb/link").symlink_to("tool")
  (pkg / "usr/lib/python3/dist-packages").mkdir(parents=True)
  (pkg / APT_PTH).write_bytes(PTH)  # like python3-setuptools' distutils-precedence.pth
  (pkg / "etc/ld.so.conf.d").mkdir(parents=True)
  (pkg / CONFFILE).write_bytes(CONF)
  control = (
    f"Package: tinydeb\nVersion: {version}\nArchitecture: all\nMaintainer: t <t@localhost>\n"
  )
  (pkg / "DEBIAN/control").write_text(control + "Description: test package\n")
  (pkg / "DEBIAN/postinst").write_text(POSTINST)
  (pkg / "DEBIAN/postinst").chmod(0o755)
  (pkg / "DEBIAN/conffiles").write_text(f"/{CONFFILE}\n")
  repo.mkdir(parents=True, exist_ok=True)
  deb = repo / f"tinydeb_{version}_all.deb"
  subprocess.run(
    ["dpkg-deb", "--root-owner-group", "--build", str(pkg), str(deb)],
    check=True,
    capture_output=True,
  )
  data = deb.read_bytes()
  entry = f"Filename: ./{deb.name}\nSize: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
  (repo / "Packages").write_text(control + entry + "Description: test package\n\n")
  return deb


def dpkg_status(package: str, version: str, state: str = "installed") -> str:
  """A dpkg status stanza of a package in `state` (installed, unpacked, half-configured...)."""
  return (
    f"Package: {package}\nStatus: install ok {state}\nArchitecture: all\nVersion: {version}\n"
    "Description: x\n\n"
  )
