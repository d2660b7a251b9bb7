"""The tamper scan's genuine-package exemption without a sandbox: layers on disk as an overlay
leaves them, a real wheel fetched by the host's pip from a local folder, a real .deb from a
flat apt repository read over file://."""

from __future__ import annotations

import hashlib
import os
import pathlib
import struct
import zipfile

import pytest
from package_files import APT_PTH, CONF, CONFFILE, INIT, PTH, TOOL, apt_repo, dpkg_status, wheel

from envs.sandbox import genuine, genuine_pip, system_guard
from envs.sandbox.egress_sources import PackageSources
from envs.sandbox.rootview import RootView

SITE = "usr/local/lib/python3.11/dist-packages"


def _write(root: pathlib.Path, rel: str, data: bytes) -> None:
  (root / rel).parent.mkdir(parents=True, exist_ok=True)
  (root / rel).write_bytes(data)


def _layers(tmp: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
  """(upper, lower): an image with python, merged /usr (bin -> usr/bin) and a dpkg status."""
  lower, upper = tmp / "lower", tmp / "upper"
  _write(lower, "usr/bin/python3.11", b"\x7fELF python")
  _write(lower, "var/lib/dpkg/status", dpkg_status("base-files", "12").encode())
  (lower / SITE).mkdir(parents=True)
  (lower / "bin").symlink_to("usr/bin")
  upper.mkdir()
  return upper, lower


def _pip_install(whl: pathlib.Path, upper: pathlib.Path) -> None:
  """What pip writes for a wheel: its members (.data/purelib beside) plus its own metadata."""
  with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
      rel = name.split("/", 2)[-1] if ".data/purelib/" in name else name
      _write(upper / SITE, rel, z.read(name))
  info = whl.name.split("-")[0] + "-0.1.dist-info"
  _write(upper / SITE, f"{info}/INSTALLER", b"pip\n")
  _write(upper / SITE, f"{info}/RECORD", b"rewritten by pip\n")


def _judge(upper, lower, sources, cache):
  now = system_guard.fingerprint(str(upper), (str(lower),))
  diff = system_guard.changed({}, now)
  return genuine.excuse(diff, {}, now, RootView(str(upper), (str(lower),)), sources, str(cache))


@pytest.fixture
def wheels(tmp_path):
  folder = tmp_path / "wheels"
  wheel(folder)
  return PackageSources(pip_find_links=(str(folder),))


def test_genuine_wheel_is_excused_and_a_changed_byte_is_not(tmp_path, wheels):
  upper, lower = _layers(tmp_path)
  _pip_install(pathlib.Path(wheels.pip_find_links[0]) / "tinypkg-0.1-py3-none-any.whl", upper)
  assert _judge(upper, lower, wheels, tmp_path / "cache") == ([], [])
  assert list((tmp_path / "cache/pip").iterdir())  # verified once, kept
  _write(upper / SITE, "tinypkg/__init__.py", INIT.replace(b"42", b"43"))
  _write(upper / SITE, "tinypkg/evil.py", b"import os\n")
  flagged, notes = _judge(upper, lower, wheels, tmp_path / "cache")
  assert flagged == [f"{SITE}/tinypkg/__init__.py", f"{SITE}/tinypkg/evil.py"] and notes == []


def test_forged_dist_info_is_flagged(tmp_path, wheels):
  """RECORD and METADATA say tinypkg 0.1, but the files are not the genuine wheel's."""
  upper, lower = _layers(tmp_path)
  forged = wheel(tmp_path / "forged", init=b"import pytest  # patched\n")
  _pip_install(forged, upper)
  flagged, _ = _judge(upper, lower, wheels, tmp_path / "cache")
  assert flagged == [f"{SITE}/tinypkg/__init__.py"]  # the rest equals the genuine wheel's


def test_unfetchable_package_is_flagged_with_a_note(tmp_path, wheels):
  upper, lower = _layers(tmp_path)
  _pip_install(wheel(tmp_path / "other", name="nosuchpkg"), upper)
  flagged, notes = _judge(upper, lower, wheels, tmp_path / "cache")
  assert f"{SITE}/nosuchpkg/__init__.py" in flagged
  assert len(notes) == 1 and notes[0].startswith("nosuchpkg 0.1: no wheel")


def test_a_claim_that_pip_would_read_as_an_option_is_not_fetched(tmp_path, wheels):
  """A forged METADATA naming "--index-url=..." would make the host's pip fetch from a source
  of the agent's choosing: such a name or version is never fetched."""
  upper, lower = _layers(tmp_path)
  _pip_install(pathlib.Path(wheels.pip_find_links[0]) / "tinypkg-0.1-py3-none-any.whl", upper)
  meta = f"{SITE}/tinypkg-0.1.dist-info/METADATA"
  for name, version in (
    ("--index-url=file:///tmp/x", "0.1"),
    ("tinypkg", "-0.1"),
    ("tiny pkg", "0.1"),
  ):
    _write(upper, meta, f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode())
    flagged, notes = _judge(upper, lower, wheels, tmp_path / "cache")
    assert f"{SITE}/tinypkg/__init__.py" in flagged and "no name, version or tag" in notes[0]
  assert not (tmp_path / "cache" / "pip").exists()


def test_genuine_pth_that_runs_code_stays_flagged(tmp_path):
  folder = tmp_path / "wheels"
  whl = wheel(folder)
  with zipfile.ZipFile(whl, "a") as z:
    z.writestr("hook.pth", b"import os; os.environ['X'] = '1'\n")
  upper, lower = _layers(tmp_path)
  _pip_install(whl, upper)
  flagged, notes = _judge(upper, lower, PackageSources(pip_find_links=(str(folder),)), tmp_path)
  assert flagged == [f"{SITE}/hook.pth"] and "runs code" in notes[0]


def _dpkg_install(deb_root: pathlib.Path, upper: pathlib.Path, version: str) -> None:
  """What dpkg and the postinst write: the files, the status and the alternative."""
  _write(upper, "usr/lib/tinydeb/tool", TOOL)
  (upper / "usr/lib/tinydeb/link").symlink_to("tool")
  status = dpkg_status("base-files", "12") + dpkg_status("tinydeb", version)
  _write(upper, "var/lib/dpkg/status", status.encode())
  (upper / "etc/alternatives").mkdir(parents=True)
  (upper / "etc/alternatives/tinyalt").symlink_to("/usr/lib/tinydeb/tool")
  (upper / "usr/bin").mkdir(parents=True)
  (upper / "usr/bin/tinyalt").symlink_to("/etc/alternatives/tinyalt")


def test_genuine_deb_and_its_alternative_are_excused(tmp_path):
  repo = tmp_path / "repo"
  apt_repo(repo)
  sources = PackageSources(apt_uris=(f"file://{repo}",))
  upper, lower = _layers(tmp_path)
  _dpkg_install(repo, upper, "1.0")
  assert _judge(upper, lower, sources, tmp_path / "cache") == ([], [])
  # the alternative now ends at a file no package has
  (upper / "etc/alternatives/tinyalt").unlink()
  (upper / "etc/alternatives/tinyalt").symlink_to("/usr/lib/tinydeb/evil")
  _write(upper, "usr/lib/tinydeb/evil", b"#!/bin/sh\nexit 0\n")
  _write(upper, "usr/lib/tinydeb/tool", TOOL + b"# changed\n")
  flagged, _ = _judge(upper, lower, sources, tmp_path / "cache")
  assert flagged == ["usr/bin/tinyalt", "usr/lib/tinydeb/evil", "usr/lib/tinydeb/tool"]


def test_a_code_running_pth_passes_only_from_the_apt_archive(tmp_path):
  """python3-setuptools ships a .pth with an import line (distutils-precedence.pth): genuine
  from the machine's apt archive it passes; the same bytes from a wheel, or changed, do not."""
  repo = tmp_path / "repo"
  apt_repo(repo)
  sources = PackageSources(apt_uris=(f"file://{repo}",))
  upper, lower = _layers(tmp_path)
  _dpkg_install(repo, upper, "1.0")
  _write(upper, APT_PTH, PTH)
  assert _judge(upper, lower, sources, tmp_path / "cache") == ([], [])
  _write(upper, APT_PTH, PTH + b"import evil\n")
  assert _judge(upper, lower, sources, tmp_path / "cache")[0] == [APT_PTH]


def test_a_module_cache_passes_when_every_module_it_names_is_checked(tmp_path):
  """gdk-pixbuf's loaders.cache and GTK's immodules.cache (written by a postinst, in no
  package): each module path it lists must lie below a protected prefix, where the scan checks
  the module itself; a signature line that looks like a path (XPM's `"/* XPM */"`, as
  download-youtube's ffmpeg install wrote it) is no module. GIO's cache names modules of its
  own folder."""
  cache = "usr/lib/x86_64-linux-gnu/gdk-pixbuf-2.0/2.10.0/loaders.cache"
  gtk = "usr/lib/x86_64-linux-gnu/gtk-2.0/2.10.0/immodules.cache"
  gio = "usr/lib/x86_64-linux-gnu/gio/modules/giomodule.cache"
  mod = "/usr/lib/x86_64-linux-gnu/gdk-pixbuf-2.0/2.10.0/loaders/libpixbufloader-xpm.so"
  upper, lower = _layers(tmp_path)
  head = "# GdkPixbuf Image Loader Modules file\n#\n"
  ok = f'{head}"{mod}"\n"xpm" 4 "gdk-pixbuf" "XPM" "LGPL"\n"image/x-xpixmap" ""\n"xpm" ""\n'
  ok += '"/* XPM */" "" 100\n"/*" "" 50\n"II* \\020   CR\\002 " "   z zzz   z" 0\n\n'
  evil = '"/tmp/evil.so"\n"x" 5 "y" "X" "LGPL"\n'
  for text, flagged in (
    (ok, []),
    (ok + evil, [cache]),
    (f'{head}"{mod}"\n"xpm" 4 "gdk-pixbuf" "XPM" "LGPL"\n#\n{evil}', [cache]),  # after a comment
    (ok.replace("\n\n", "\r\n" + evil), [cache]),  # a CR ends a line for glib
    (ok.replace(" 50\n", " 50\\\n\n" + evil), [cache]),  # pango joins a line ending in \\
    (ok.replace(mod, mod + "\\x"), [cache]),
    ('"/usr/lib/../../tmp/evil.so"\n', [cache]),
    ("# no module at all\n", [cache]),
  ):
    _write(upper, cache, text.encode())
    assert _judge(upper, lower, PackageSources(), tmp_path / "cache")[0] == flagged, text
  (upper / cache).unlink()
  im = '"/usr/lib/x86_64-linux-gnu/gtk-2.0/2.10.0/immodules/im-thai.so" \n'
  im += '"thai" "Thai-Lao" "gtk20" "/usr/share/locale" "lo:th" \n\n'
  for text, flagged in ((im, []), (im + evil, [gtk])):
    _write(upper, gtk, text.encode())
    assert _judge(upper, lower, PackageSources(), tmp_path / "cache")[0] == flagged, text
  (upper / gtk).unlink()
  for text, flagged in (
    ("libdconfsettings.so: gsettings-backend\nlibgvfsdbus.so: gio-vfs,gio-volume-monitor\n", []),
    ("../../../tmp/evil.so: gio-vfs\n", [gio]),
  ):
    _write(upper, gio, text.encode())
    assert _judge(upper, lower, PackageSources(), tmp_path / "cache")[0] == flagged, text


def test_files_past_the_fingerprint_budget_are_hashed_to_be_excused(tmp_path, monkeypatch):
  """run-pdp11-code's `apt-get install default-jdk xvfb` writes more than the fingerprint hashes
  (1 GiB): the files after that were digests of their size only, so no genuine member matched
  and 182 genuine files (and the alternatives ending at them) were tamper. The host now hashes
  such a file whole when a genuine package has one at its path; a changed byte stays flagged."""
  monkeypatch.setattr(system_guard, "_MAX_HASHED", 0)  # every non-empty file past the budget
  repo = tmp_path / "repo"
  apt_repo(repo)
  sources = PackageSources(apt_uris=(f"file://{repo}",))
  upper, lower = _layers(tmp_path)
  _dpkg_install(repo, upper, "1.0")
  now = system_guard.fingerprint(str(upper), (str(lower),))
  assert now["usr/lib/tinydeb/tool"].endswith(f":size={len(TOOL)}")
  assert _judge(upper, lower, sources, tmp_path / "cache") == ([], [])
  _write(upper, "usr/lib/tinydeb/tool", TOOL.replace(b"genuine", b"GENUINE"))  # same size
  _write(upper, "usr/lib/tinydeb/extra", TOOL)  # a path no package has
  flagged, _ = _judge(upper, lower, sources, tmp_path / "cache")
  assert flagged == ["usr/bin/tinyalt", "usr/lib/tinydeb/extra", "usr/lib/tinydeb/tool"]


def test_interrupted_dpkg_leaves_genuine_files_and_the_partial_one_flagged(tmp_path):
  """dpkg killed (or a postinst failed) after unpacking: the package is `unpacked` or
  `half-configured` (in the status or only in dpkg's journal), its files are genuine (and its
  conffile, `X.dpkg-new` until configured, the genuine X's bytes); one
  mid-unpack (`half-installed`) keeps a `.dpkg-new` no package has. A removed package
  (`config-files`) is fetched for nothing."""
  repo = tmp_path / "repo"
  apt_repo(repo)
  sources = PackageSources(apt_uris=(f"file://{repo}",))
  for state in ("unpacked", "half-configured"):
    upper, lower = _layers(tmp_path / state)
    _write(upper, "usr/lib/tinydeb/tool", TOOL)
    (upper / "usr/lib/tinydeb/link").symlink_to("tool")
    _write(upper, f"{CONFFILE}.dpkg-new", CONF)  # a conffile waits for configure there
    status = dpkg_status("base-files", "12") + dpkg_status("tinydeb", "1.0", state)
    _write(upper, "var/lib/dpkg/status", status.encode())
    assert _judge(upper, lower, sources, tmp_path / "cache") == ([], []), state
  _write(upper, f"{CONFFILE}.dpkg-new", b"/tmp/evil\n")  # not the genuine conffile
  assert _judge(upper, lower, sources, tmp_path / "cache")[0] == [f"{CONFFILE}.dpkg-new"]
  (upper / f"{CONFFILE}.dpkg-new").unlink()
  (upper / "usr/lib/tinydeb/link").unlink()
  _write(upper, "usr/lib/tinydeb/link.dpkg-new", TOOL)
  status = dpkg_status("base-files", "12") + dpkg_status("tinydeb", "1.0", "half-installed")
  _write(upper, "var/lib/dpkg/status", status.encode())
  assert _judge(upper, lower, sources, tmp_path / "cache") == (
    ["usr/lib/tinydeb/link.dpkg-new"],
    [],
  )
  # dpkg stopped before folding its journal into the status: the journal names the package
  _write(upper, "var/lib/dpkg/status", dpkg_status("base-files", "12").encode())
  _write(upper, "var/lib/dpkg/updates/0003", dpkg_status("tinydeb", "1.0", "unpacked").encode())
  assert _judge(upper, lower, sources, tmp_path / "cache") == (
    ["usr/lib/tinydeb/link.dpkg-new"],
    [],
  )
  (upper / "var/lib/dpkg/updates/0003").unlink()
  status = dpkg_status("base-files", "12") + dpkg_status("tinydeb", "1.0", "config-files")
  _write(upper, "var/lib/dpkg/status", status.encode())
  flagged, notes = _judge(upper, lower, sources, tmp_path / "cache")
  assert flagged == ["usr/lib/tinydeb/link.dpkg-new", "usr/lib/tinydeb/tool"] and notes == []


def test_forged_dpkg_status_is_flagged(tmp_path):
  """The status names a version no source has: nothing is excused, and a note says why."""
  repo = tmp_path / "repo"
  apt_repo(repo)
  upper, lower = _layers(tmp_path)
  _dpkg_install(repo, upper, "9.9")
  flagged, notes = _judge(upper, lower, PackageSources(apt_uris=(f"file://{repo}",)), tmp_path)
  assert flagged == ["usr/bin/tinyalt", "usr/lib/tinydeb/link", "usr/lib/tinydeb/tool"]
  assert notes == ["tinydeb 9.9 (all): in no index of the sandbox's apt sources"]


def _ld_cache(paths: list[str]) -> bytes:
  """A glibc new-format ld.so.cache naming `paths` (built by hand from dl-cache.h)."""
  strings, entries = b"", b""
  base = 48 + 24 * len(paths)
  for p in paths:
    key = base + len(strings)
    strings += os.path.basename(p).encode() + b"\0"
    value = base + len(strings)
    strings += p.encode() + b"\0"
    entries += struct.pack("<iIIIQ", 0x303, key, value, 0, 0)
  head = b"glibc-ld.so.cache1.1" + struct.pack("<IIB3xI12x", len(paths), len(strings), 2, 0)
  return head + entries + strings


def test_ld_so_cache_is_excused_only_when_every_library_is_protected(tmp_path):
  assert genuine.ld_cache_paths(_ld_cache(["/usr/lib/a.so.1", "/lib/b.so"])) == [
    "/usr/lib/a.so.1",
    "/lib/b.so",
  ]
  real = pathlib.Path("/etc/ld.so.cache")
  if real.is_file() and real.read_bytes().startswith(b"glibc-ld.so.cache1.1"):
    assert all(p.startswith("/") for p in genuine.ld_cache_paths(real.read_bytes()))
  sources = PackageSources()
  upper, lower = _layers(tmp_path)
  _write(upper, "etc/ld.so.cache", _ld_cache(["/usr/lib/x86_64-linux-gnu/libz.so.1"]))
  assert _judge(upper, lower, sources, tmp_path) == ([], [])
  _write(upper, "etc/ld.so.cache", _ld_cache(["/usr/lib/libz.so.1", "/workspace/libz.so.1"]))
  assert _judge(upper, lower, sources, tmp_path)[0] == ["etc/ld.so.cache"]
  _write(upper, "etc/ld.so.cache", _ld_cache(["/usr/lib/../../workspace/libz.so.1"]))
  assert _judge(upper, lower, sources, tmp_path)[0] == ["etc/ld.so.cache"]


def test_root_view_follows_overlay_rules(tmp_path):
  upper, lower = _layers(tmp_path)
  _write(lower, "usr/lib/gone", b"x")
  (upper / "usr/lib").mkdir(parents=True)
  os.mknod(upper / "usr/lib/gone", 0o20000, 0)  # what overlayfs leaves for a deletion
  view = RootView(str(upper), (str(lower),))
  assert view.locate("usr/lib/gone") is None  # a whiteout
  assert view.locate("usr/bin/python3.11")[0] == "lower"
  assert view.resolve("bin/python3.11") == "usr/bin/python3.11"  # through the image's link
  (upper / "usr/lib/esc").symlink_to("/../../etc")
  assert view.resolve("usr/lib/esc/x") is None  # resolved inside the root: no such path
  assert view.listdir("usr/lib") == ["esc"]
  assert view.listdir("usr/bin") == ["python3.11"]  # a folder only the image has
  assert genuine.content(system_guard.fingerprint(str(upper))["usr/lib/esc"]) == "l:/../../etc"


def test_wheel_members_and_fetch_targets(tmp_path):
  whl = wheel(tmp_path)
  found = genuine_pip.members(str(whl))
  assert found["tinypkg/__init__.py"] == "f:" + hashlib.sha256(INIT).hexdigest()
  assert "tinypkg_extra.py" in found and not any(".data" in k for k in found)
  tags = ["cp311-cp311-manylinux_2_17_x86_64", "cp311-cp311-manylinux2014_x86_64"]
  assert genuine_pip.target_args(tags, "311") == [
    "--python-version", "311", "--implementation", "cp", "--abi", "cp311",
    "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64",
  ]  # fmt: skip
  assert genuine_pip.target_args(["py3-none-any"], "312") == ["--python-version", "312"]
