"""Shared entry-point handling of the launch scripts: one-line errors, --verbose, log.txt.

  if __name__ == "__main__":
    cli.run(main)              # instead of absl's app.run(main)

Known errors (a bad flag or config value, a task format error, a checkpoint that is not one,
a sandbox backend that is missing, a missing path) print one line, `error: <cause>`, and exit 2;
the traceback goes to the log file (`log_to`) and, with --verbose, to the console. Anything else
is a bug and keeps its traceback.

`log_to(WORKDIR/log.txt)` keeps the console's output (stdout and stderr as printed) in that
file and sends library INFO logs (orbax, absl, jax) there instead of the console, which keeps
warnings and errors, as `warning: <message>` lines without absl's prefix.
"""

from __future__ import annotations

import logging as std_logging
import pathlib
import sys
import traceback

from absl import app, flags
from absl import logging as absl_logging

FLAGS = flags.FLAGS
EXIT_USAGE = 2
_LOG: list[pathlib.Path] = []  # the log file of this process, once known


class LaunchError(ValueError):
  """A user error found by a launch script itself (message: the one line to print)."""


def _known() -> tuple[type[BaseException], ...]:
  from envs.sandbox.base import SandboxError
  from envs.task import TaskFormatError
  from models.io.hf_config import CheckpointError

  return (
    app.UsageError,
    flags.Error,
    LaunchError,
    TaskFormatError,
    CheckpointError,
    SandboxError,
    FileNotFoundError,
    NotADirectoryError,
    ValueError,
    KeyError,
    TypeError,
  )


def _one_line(e: BaseException) -> str:
  msg = e.args[0] if isinstance(e, KeyError) and e.args else str(e)
  msg = str(msg)
  if len(msg) > 1 and msg[0] == msg[-1] and msg[0] in "'\"":  # a KeyError's repr'd message
    msg = msg[1:-1]
  msg = msg.replace("\\n", " ").replace("\\'", "'").replace('\\"', '"')
  msg = " ".join(msg.split())
  if isinstance(e, (FileNotFoundError, NotADirectoryError)) and e.filename:
    msg = f"{e.filename}: {e.strerror or msg}"
  return msg or type(e).__name__


def _verbose() -> bool:
  try:
    return bool(FLAGS.verbose)
  except (AttributeError, flags.UnparsedFlagAccessError):
    return "--verbose" in sys.argv


def fail(e: BaseException) -> None:
  """Prints `error: <cause>` (and the traceback when verbose), logs the traceback, exits 2."""
  tb = "".join(traceback.format_exception(e))
  for path in _LOG:
    with open(path, "a") as f:
      f.write(tb)
  if _verbose():
    sys.stderr.write(tb)
  where = f" (traceback in {_LOG[0]})" if _LOG and not _verbose() else ""
  sys.stderr.write(f"error: {_one_line(e)}{where}\n")
  sys.stderr.flush()
  sys.exit(EXIT_USAGE)


class _Tee:
  """A console stream that also appends its finished lines to a file (a progress bar's
  redraws, split by carriage returns, keep only their last state)."""

  def __init__(self, stream, file):
    self.stream, self.file, self.buf = stream, file, ""

  def write(self, text: str) -> int:
    n = self.stream.write(text)
    self.buf += text
    *lines, self.buf = self.buf.split("\n")
    for line in lines:
      self.file.write(line.rsplit("\r", 1)[-1] + "\n")
    if lines:
      self.file.flush()
    return n

  def flush(self) -> None:
    self.stream.flush()

  def __getattr__(self, name):  # isatty, fileno, encoding, ...: the console's
    return getattr(self.stream, name)


def log_to(path) -> pathlib.Path:
  """The console (stdout and stderr, as printed) and library INFO logs go to `path`
  (appended); the console itself keeps WARNING and above of the libraries."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  if path in _LOG:
    return path
  _LOG.append(path)
  console = open(path, "a", buffering=1)  # noqa: SIM115  (open for the process's life)
  sys.stdout, sys.stderr = _Tee(sys.stdout, console), _Tee(sys.stderr, console)
  handler = std_logging.FileHandler(path)
  handler.setLevel(std_logging.INFO)
  handler.setFormatter(std_logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
  root = std_logging.getLogger()
  root.addHandler(handler)
  root.setLevel(std_logging.INFO)
  absl_logging.set_verbosity(absl_logging.INFO)
  absl_handler = absl_logging.get_absl_handler()
  absl_handler.setLevel(std_logging.WARNING)  # the console
  return path


def _fields() -> dict:
  """Every --config.<path> of an experiment and its default (rl.config.Experiment)."""
  import dataclasses

  from rl.config import Experiment
  from rl.runtime.run import flat_config

  return flat_config(dataclasses.asdict(Experiment()))


def suggest(path: str, fields) -> str:
  """'; did you mean --config.<the field>?' for a path that is not one (or '')."""
  import difflib

  ends = [f for f in fields if f.endswith("." + path)]  # a section left out: optim.lr
  close = ends or difflib.get_close_matches(path, list(fields), 1, 0.6)
  return f"; did you mean --config.{close[0]}?" if close else ""


def _config_arg_error(args: list[str]) -> LaunchError | None:
  """The first --config.<path> argument that names no field or has no value, if any."""
  fields = _fields()
  for i, arg in enumerate(args):
    if not arg.startswith("--config."):
      continue
    name, eq, _ = arg[2:].partition("=")
    path = name[len("config.") :]
    section = any(f.startswith(path + ".") for f in fields)
    if path not in fields and not section:
      return LaunchError(f"--{name}: unknown config field{suggest(path, fields)}")
    last = i + 1 == len(args) or args[i + 1].startswith("--")
    if not eq and last and not isinstance(fields.get(path), bool):
      return LaunchError(f"--{name}: no value given (write --{name}=VALUE)")
  return None


def _flag_error(e: BaseException, argv) -> LaunchError:
  """A flag parse error as one line naming the flag (ml_collections raises bare errors)."""
  cause = e.__cause__ or e.__context__ if isinstance(e, flags.Error) else e
  msg = _one_line(cause or e)
  found = _config_arg_error(list(argv[1:]))
  if found is not None:
    return found
  bad = [a for a in argv[1:] if a.startswith("--config.") and "=" in a]
  for arg in bad:
    name, value = arg[2:].split("=", 1)
    if name.rsplit(".", 1)[-1] in msg or value in msg:
      what = (
        "unknown config field" if isinstance(cause, (AttributeError, KeyError)) else "bad value"
      )
      return LaunchError(f"--{name}: {what}: {msg}")
  return LaunchError(msg)


def _parse(argv):
  try:
    return FLAGS(argv)
  except (flags.Error, AttributeError, KeyError, ValueError, TypeError) as e:
    fail(_flag_error(e, argv))  # ml_collections' overrides raise bare errors


class _ConsoleFormatter(std_logging.Formatter):
  """A library or launch warning on the console as `warning: <message>` (no absl prefix)."""

  def format(self, record: std_logging.LogRecord) -> str:
    text = f"{record.levelname.lower()}: {record.getMessage()}"
    return f"{text}\n{self.formatException(record.exc_info)}" if record.exc_info else text


def run(main) -> None:
  """absl's app.run(main) with the handling above (defines --verbose)."""
  if "verbose" not in FLAGS:
    flags.DEFINE_bool("verbose", False, "Print full tracebacks of known errors.")
  known = _known()

  def wrapped(argv):
    handler = absl_logging.get_absl_handler()
    handler.setLevel(std_logging.WARNING)  # INFO: only to log_to's file
    handler.setFormatter(_ConsoleFormatter())  # "warning: ...", not absl's "W1205 23:13:49 ..."
    try:
      return main(argv)
    except known as e:
      fail(e)

  app.run(wrapped, flags_parser=_parse)
