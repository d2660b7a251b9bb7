"""Replays a task's Dockerfile on the project's base image (no image pulls, no network).

Terminal-Bench and Harbor tasks ship a Dockerfile whose base image often cannot be pulled
here. `translate()` maps a Debian, Ubuntu or python-slim `FROM` onto the base image and turns
the remaining steps into a setup script plus staged files:

  FROM          Debian/Ubuntu/python-slim bases; the WORKDIR and ENV of known public bases
                apply (Terminal-Bench's ghcr.io/laude-institute/t-bench/* images: /app);
                language images (gcc, golang, eclipse-temurin, ...) add their toolchain's
                distribution packages (envs/formats/docker_bases.py)
  WORKDIR       the last one becomes the task's writable workspace (e.g. /app)
  ENV / ARG     exported for later steps; ENV also becomes the sandbox environment
  USER          later RUNs run as it; the task's user (the container-like sandbox applies it)
  COPY / ADD    files staged from the build context and copied in order (ADD unpacks tars);
                a destination outside the workspace makes the task need the container-like
                sandbox mode (a writable root)
  RUN           replayed in the sandbox; the packages of `apt-get install` and `pip install`
                become the task's apt/pip packages, which the sandbox installs into a
                per-task image layer at build time; the replayed step then only checks that
                they are there (failing, naming the line, when they are not); apt
                housekeeping is dropped; network installers of test tooling (uv, curl | sh)
                are dropped because the verifier brings its own pytest; harness tools (tmux,
                asciinema, curl) are installed like any package, and Terminal-Bench's base
                images bring them (docker_bases.TBENCH_PACKAGES)

A step that cannot be replayed fails statically (`DockerfileError`, naming the line) or, when
only the sandbox can tell (a missing package), the setup script exits with code 97 and a
message naming the line. Nothing here parses Dockerfiles fully (no library does the
instruction-level rewriting we need); the subset covers what task Dockerfiles use.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import io
import json
import posixpath
import re
import shlex
import tarfile

from envs.formats.docker_bases import (
  DEFAULT_PATH,
  KNOWN_BASES,
  base_user,
  cache_path,
  map_base,
  python_link,
  python_pip,
  skeleton,
  toolchain,
)
from envs.formats.docker_packages import (
  INSTALLER_URL,
  PRELUDE,
  apt_install,
  apt_noop,
  no_recommends,
  pip_install,
  pip_requirements,
  strip_prefix,
)
from envs.formats.dockerfile_syntax import (
  DockerfileError,
  expand,
  heredoc_script,
  heredocs,
  logical_lines,
  parse_kv,
  split_segments,
  without_heredocs,
)
from envs.task import FileEntry, Files, TaskFormatError

__all__ = ["DockerPlan", "DockerfileError", "KNOWN_BASES", "TB1_EXCLUDED", "translate"]

# A Terminal-Bench 1 task's build context is its whole folder (less .dockerignore), the harness's
# own files too: a COPY that names one (`COPY solution.sh /app/`, `COPY tests/data.txt .`) gets
# it, as in Docker. A folder or wildcard COPY (`COPY . /app`) leaves them out, so the agent never
# finds the answer or the hidden tests in its workspace. Harbor's context is environment/.
TB1_EXCLUDED = ("tests", "solution", "solution.sh", "solution.yaml", "run-tests.sh")
_TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")


@dataclasses.dataclass(frozen=True)
class DockerPlan:
  """The translation of one Dockerfile onto the base image."""

  base: str  # the FROM image it replaced
  workdir: str
  env: tuple[tuple[str, str], ...]
  setup_script: str
  setup_files: Files
  warnings: tuple[str, ...]
  apt_packages: tuple[str, ...] = ()
  pip_packages: tuple[str, ...] = ()
  user: str = ""
  needs_container: bool = False  # writes outside the workspace (a COPY into /, /usr, ...)
  apt_no_recommends: tuple[str, ...] = ()  # of apt_packages: those installed without recommends


class _Translator:
  def __init__(self, file: str, context: Files, strict: bool, exclude: tuple[str, ...]):
    self.file, self.strict, self.hidden = file, strict, exclude
    self.context = {f.path: f for f in context}
    self.apt: list[str] = []
    self.no_rec: list[str] = []  # installed by a line with --no-install-recommends
    self.pip: list[str] = []
    self.env: dict[str, str] = {"PATH": DEFAULT_PATH}
    self.args: dict[str, str] = {}
    self.task_env: dict[str, str] = {}
    self.cwd = "/"
    self.workdirs: list[str] = []
    self.steps: list[tuple[int, str, str]] = []  # (line, kind, payload)
    self.files: list[FileEntry] = []
    self.warnings: list[str] = []
    self.base = ""
    self.texts: dict[int, str] = {}

  def err(self, line: int, text: str, cause: str) -> DockerfileError:
    return DockerfileError(self.file, line, text, cause)

  def warn(self, line: int, msg: str) -> None:
    self.warnings.append(f"{self.file}:{line}: {msg}")

  def run(self, text: str) -> None:
    for line, instr in logical_lines(text):
      kw, args = (re.split(r"\s", instr.strip(), maxsplit=1) + [""])[:2]
      handler = getattr(self, "do_" + kw.lower(), None)
      if handler is None:
        raise self.err(line, instr, f"unknown instruction {kw!r}")
      self.texts[line] = instr
      handler(line, instr, args.strip())
    if not self.base:
      raise TaskFormatError(self.file, "FROM", "no FROM instruction")

  def ignore(self, line, text, args):
    """Instructions with no effect on the task's files (CMD, EXPOSE, LABEL, USER, ...)."""

  do_cmd = do_entrypoint = do_expose = do_label = do_maintainer = do_volume = ignore
  do_healthcheck = do_stopsignal = do_onbuild = do_shell = ignore

  def do_user(self, line, text, args):
    self.steps.append((line, "user", expand(args.strip(), {**self.args, **self.env})))

  def do_from(self, line, text, args):
    if self.base:
      raise self.err(line, text, "multi-stage builds are not supported (a second FROM)")
    toks = [t for t in shlex.split(expand(args, self.args)) if not t.startswith("--")]
    self.base = map_base(toks[0], self.file, line, text)
    for prefix, workdir, env in KNOWN_BASES:
      if self.base.startswith(prefix):
        for k, v in env:
          self.env[k] = self.task_env[k] = v
          self.steps.append((line, "env", f"export {k}={shlex.quote(v)}"))
        if workdir:
          self.cwd = workdir
          self.workdirs.append(workdir)
          self.steps.append((line, "workdir", workdir))
    if "python" in toks[0]:
      self.warn(line, f"{toks[0]} mapped onto the base image's python3 (version may differ)")
    self.pip += [p for p in python_pip(self.base) if p not in self.pip]
    tool = toolchain(self.base)
    if tool:
      pkgs, env = tool
      self.apt += [p for p in pkgs if p not in self.apt]
      for k, v in env:
        self.env[k] = self.task_env[k] = v
        self.steps.append((line, "env", f"export {k}={shlex.quote(v)}"))
      self.steps.append((line, "run", f"agentrl_apt {line} {shlex.join(pkgs)}"))
      self.warn(
        line, f"{toks[0]} mapped onto the base image + {' '.join(pkgs)} (version may differ)"
      )

  def do_arg(self, line, text, args):
    for k, v in parse_kv(args if "=" in args else args + "=", self.file, line, text):
      self.args[k] = expand(v, {**self.args, **self.env})
      self.env.setdefault(k, self.args[k])
      if k not in self.task_env:  # RUN sees a build argument (an ENV of that name wins)
        self.steps.append((line, "env", f"export {k}={shlex.quote(self.env[k])}"))

  def do_env(self, line, text, args):
    for k, v in parse_kv(args, self.file, line, text):
      v = expand(v, {**self.args, **self.env})
      self.env[k] = v
      self.task_env[k] = v
      self.steps.append((line, "env", f"export {k}={shlex.quote(v)}"))

  def do_workdir(self, line, text, args):
    path = posixpath.normpath(posixpath.join(self.cwd, expand(args.strip().strip('"'), self.env)))
    self.cwd = path
    self.workdirs.append(path)
    self.steps.append((line, "workdir", path))

  def do_run(self, line, text, args):
    args = re.sub(r"^(--\w+(=\S+)?\s+)+", "", args)  # --mount=..., --network=...
    first, docs = heredocs(args)
    if len(docs) == 1 and not without_heredocs(first):  # `RUN <<EOF`: the body is the script
      script = heredoc_script(docs[0].body, lambda cmd: self.rewrite(line, text, cmd))
      self.steps.append((line, "run", script))
      return
    if args.startswith("["):
      # Docker's rule: a JSON array of strings is the exec form; anything else (`[ -e x ] &&
      # ...`, the test command) is the shell form.
      try:
        argv = json.loads(args)
      except json.JSONDecodeError:
        argv = None
      if isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv):
        args = shlex.join(argv)
    self.steps.append((line, "run", self.rewrite(line, text, args)))

  def rewrite(self, line: int, text: str, cmd: str) -> str:
    if re.search(r"<<-?\s*['\"]?\w+", cmd):
      return cmd  # a heredoc body is replayed verbatim
    parts = split_segments(cmd)
    for i in range(0, len(parts), 2):
      parts[i] = self.rewrite_segment(line, text, parts[i])
    return " ".join(p for p in parts)

  def rewrite_segment(self, line: int, text: str, seg: str) -> str:
    if not seg.strip():
      return ":"
    if "|" in seg and re.search(r"\b(curl|wget)\b", seg):
      if INSTALLER_URL.search(seg) and not self.strict:
        self.warn(line, "network installer dropped (the verifier runs pytest offline)")
        return ":"
      raise self.err(line, text, "downloads from the network, which the sandbox does not have")
    try:
      argv = strip_prefix(shlex.split(seg, comments=False))
    except ValueError:
      return seg
    if not argv:
      return seg
    prog = argv[0]
    pkgs = apt_install(argv)
    if pkgs is not None:
      self.apt += [p for p in pkgs if p not in self.apt]
      if no_recommends(argv):  # Debian's default otherwise: recommends come too, as in Docker
        self.no_rec += [p for p in pkgs if p not in self.no_rec]
      return f"agentrl_apt {line} {shlex.join(pkgs)}" if pkgs else ":"
    if apt_noop(argv):
      return ":"
    if prog == "add-apt-repository":  # a PPA is the network: its packages come from our sources
      repo = " ".join(a for a in argv[1:] if not a.startswith("-"))
      self.warn(
        line, f"apt repository {repo} not added: its packages come from the machine's sources"
      )
      return ":"
    if prog in ("curl", "wget") or (prog == "git" and argv[1:2] == ["clone"]):
      raise self.err(line, text, "downloads from the network, which the sandbox does not have")
    if prog == "rm" and all(a.startswith("-") or not self.writable(a) for a in argv[1:]):
      if all(a.startswith("-") or cache_path(a) for a in argv[1:]):
        return ":"  # cache clean-ups of the read-only image
      # a system path (`rm -rf /usr/local/lib/python3.13/site-packages/pip`): removed as in
      # Docker where the root is writable (the container-like mode)
      return f"{{ [ ! -w / ] || {seg}; }}"
    pi = pip_install(argv)
    if pi is not None:
      reqs, notes = pip_requirements(pi, self.context)
      for note in notes:
        self.warn(line, note)
      reqs = [r for r in reqs if not re.match(r"^(uv|pip|setuptools|wheel)\b", r)]
      self.pip += [r for r in reqs if r not in self.pip]
      return f"agentrl_pip {line} {shlex.join(reqs)}" if reqs else ":"
    if prog in ("uv", "uvx"):
      self.warn(
        line, f"'uv {' '.join(argv[1:2])}' dropped (pytest runs offline with the image's python)"
      )
      return ":"
    if prog in ("cp", "ln", "mv", "chmod", "install") and any(
      re.search(r"(^|/)uvx?$", a) for a in argv[1:] if not a.startswith("-")
    ):  # placing the dropped installer's uv binary (`cp /root/.local/bin/uv /usr/local/bin/`)
      self.warn(line, f"'{prog}' of the uv binary dropped (the uv installer was dropped)")
      return ":"
    return seg

  def writable(self, path: str) -> bool:
    p = posixpath.normpath(posixpath.join(self.cwd, path))
    roots = ["/tmp"] + (self.workdirs[-1:] if self.workdirs else [])
    return any(p == r or p.startswith(r.rstrip("/") + "/") for r in roots)

  def do_copy(self, line, text, args, add=False):
    first, docs = heredocs(args)  # `COPY <<a.txt <<b.txt /dest/`: files written inline
    args = without_heredocs(first) if docs else args
    opts = dict(re.findall(r"--(\w+)(?:=(\S+))?\s+", args))
    args = re.sub(r"^(--\w+(=\S+)?\s+)+", "", args)
    if "from" in opts:
      raise self.err(line, text, "COPY --from (multi-stage) is not supported")
    toks = json.loads(args) if args.startswith("[") else shlex.split(args)
    if len(toks) + len(docs) < 2:
      raise self.err(line, text, "needs a source and a destination")
    srcs, dest = toks[:-1], expand(toks[-1], self.env)
    dest_abs = posixpath.normpath(posixpath.join(self.cwd, dest))
    mode = int(opts["chmod"], 8) if opts.get("chmod") else None
    as_dir = dest.endswith("/") or len(srcs) + len(docs) > 1 or dest_abs in self.workdirs
    as_dir = as_dir or dest_abs == "/tmp"
    staged = f"ctx/{len(self.steps)}"
    env = {**self.args, **self.env}
    entries: list[tuple[str, FileEntry, bool]] = [
      (d.name, FileEntry(d.name, (d.body if d.quoted else expand(d.body, env)).encode()), True)
      for d in docs
    ]
    for src in srcs:
      if re.match(r"^\w+://", src):
        raise self.err(line, text, f"{src!r} is a URL; the sandbox has no network")
      entries += self.match(line, text, src, add)
    if not entries:
      raise self.err(line, text, f"no file in the build context matches {' '.join(srcs)!r}")
    single_file = len(entries) == 1 and entries[0][2] and not as_dir
    target = posixpath.dirname(dest_abs) if single_file else dest_abs
    rels = [posixpath.basename(dest_abs) if single_file else rel for rel, _, _ in entries]
    for rel, (_, f, _) in zip(rels, entries, strict=True):
      self.files.append(FileEntry(f"{staged}/{rel}", f.data, mode or f.mode))
    owner = expand(opts.get("chown") or "", {**self.args, **self.env})
    # --chown: the copied files and the folders they bring, as in Docker
    owned = [*rels, *sorted({posixpath.dirname(r) for r in rels} - {""})] if owner else []
    self.steps.append((line, "copy", "\0".join([staged, target, owner, *owned])))

  def do_add(self, line, text, args):
    self.do_copy(line, text, args, add=True)

  def match(self, line, text, src, add) -> list[tuple[str, FileEntry, bool]]:
    """(path relative to the destination, file, is the source itself) for one COPY source."""
    s = posixpath.normpath(src)
    if s.startswith("..") or s.startswith("/"):
      raise self.err(line, text, f"source {src!r} is outside the build context")
    s = "" if s == "." else s
    out = []
    named = s.split("/", 1)[0] in self.hidden  # the COPY names a harness file or folder
    for path, f in sorted(self.context.items()):
      if not named and path.split("/", 1)[0] in self.hidden:
        continue
      if s == "" or path.startswith(s + "/"):  # a directory: its contents
        rel, itself = (path[len(s) + 1 :] if s else path), False
      elif path == s:
        rel, itself = posixpath.basename(path), True
      elif (
        any(c in s for c in "*?[") and fnmatch.fnmatch(path, s) and path.count("/") == s.count("/")
      ):
        rel, itself = posixpath.basename(path), False
      else:
        continue
      if add and path.endswith(_TAR_SUFFIXES):
        out += [(r, e, False) for r, e in self.unpack(f)]
      else:
        out.append((rel, f, itself))
    return out

  def unpack(self, f: FileEntry) -> list[tuple[str, FileEntry]]:
    out = []
    with tarfile.open(fileobj=io.BytesIO(f.data)) as tar:
      for m in tar.getmembers():
        name = posixpath.normpath(m.name)
        if m.isfile() and not name.startswith(("..", "/")):
          out.append((name, FileEntry(name, tar.extractfile(m).read(), m.mode & 0o777)))
    return out

  def outside_workspace(self) -> list[tuple[int, str]]:
    """(line, destination) of every COPY that lands outside the workspace and /tmp."""
    ws = self.workdirs[-1] if self.workdirs else None
    out = []
    for line, kind, payload in self.steps:
      if kind != "copy":
        continue
      target = payload.split("\0")[1]
      inside = ws and (target == ws or target.startswith(ws.rstrip("/") + "/"))
      if not inside and not (target == "/tmp" or target.startswith("/tmp/")):
        out.append((line, target))
    return out


def translate(
  text: str,
  context: Files = (),
  file: str = "Dockerfile",
  strict: bool = False,
  exclude: tuple[str, ...] = TB1_EXCLUDED,
) -> DockerPlan:
  """Translates a Dockerfile into a setup script and staged files for the base image."""
  t = _Translator(file, context, strict, exclude)
  t.run(text)
  outside = t.outside_workspace()
  for line, target in outside:
    t.warn(line, f"COPY into {target}, outside the workspace: needs the container sandbox mode")
  workdir = t.workdirs[-1] if t.workdirs else "/workspace"
  if not t.workdirs:
    t.warn(0, "no WORKDIR; the workspace is /workspace")
  lines = [PRELUDE, f"export PATH={shlex.quote(DEFAULT_PATH)}", python_link(t.base), base_user()]
  lines.append(skeleton(t.base))
  # As in Docker, a RUN runs as the USER before it (name[:group] or uid[:gid]; "": root).
  user, home_set = "", False
  for line, kind, payload in t.steps:
    if kind == "user":
      user = "" if payload.split(":")[0] in ("root", "0") else payload
    elif kind == "env":
      home_set = home_set or payload.startswith("export HOME=")
      lines.append(payload)
    elif kind == "workdir":
      cwd = shlex.quote(payload)
      lines.append(
        f"mkdir -p {cwd} 2>/dev/null; cd {cwd} || agentrl_fail {line} $? 'WORKDIR {payload}'"
      )
    elif kind == "copy":
      staged, target, owner, *rels = payload.split("\0")
      # tar, not `cp -a src/. dst/`: that gives an existing dst (/tmp: 1777) the staging
      # folder's mode and owner; Docker's COPY leaves an existing folder as it is.
      dst = shlex.quote(target)
      lines.append(
        f'mkdir -p {dst} && (set -o pipefail; tar -C "$SETUP_DIR"/{staged} -cf - . | tar -C '
        f"{dst} -xpf - --no-overwrite-dir) || agentrl_fail {line} $? 'COPY into {target}'"
      )
      if owner:
        lines.append(
          f"(cd {dst} && chown -h {shlex.quote(owner)} -- {shlex.join(rels)}) "
          f"|| agentrl_fail {line} $? 'COPY --chown={owner}'"
        )
    else:  # bash -e in its own process: `set -e` is void inside a `( ... ) || x` list
      what = shlex.quote(t.texts.get(line, payload).strip().splitlines()[0][:160])
      run = f"bash -ec {shlex.quote(payload)}"
      if user:
        run = f"agentrl_as {line} {shlex.quote(user)} {int(home_set)} {run}"
      lines.append(f"{run} || agentrl_fail {line} $? {what}")
  return DockerPlan(
    t.base,
    workdir,
    tuple(t.task_env.items()),
    "\n".join(lines) + "\n",
    tuple(t.files),
    tuple(t.warnings),
    tuple(t.apt),
    tuple(t.pip),
    user,
    bool(outside),
    tuple(p for p in t.no_rec if p in t.apt),
  )
