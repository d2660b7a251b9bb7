"""The import rules: every module imports; packages import one way (launch -> rl -> envs ->
models -> parallel, and rl's algorithm never imports rl.runtime); no circle among module-level
imports; no `_private` name imported from another module of this repository."""

import ast
import importlib
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = ("launch", "rl.runtime", "rl", "envs", "models", "parallel")  # may import rightwards


def _modules() -> dict[str, pathlib.Path]:
  out = {}
  for pkg in ("launch", "rl", "envs", "models", "parallel"):
    for p in sorted((ROOT / pkg).rglob("*.py")):
      if "tasks" in p.relative_to(ROOT).parts[1:2]:  # envs/tasks: task data, not code
        continue
      parts = p.relative_to(ROOT).with_suffix("").parts
      out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
  return out


MODULES = _modules()


def _layer(module: str) -> int:
  return next(i for i, pkg in enumerate(LAYERS) if module == pkg or module.startswith(pkg + "."))


def _imports(path: pathlib.Path, module: str):
  """(imported module, names, line, top level?) of each import of a repository module."""
  tree = ast.parse(path.read_text())
  top = {id(n) for n in tree.body}
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      for a in node.names:
        yield a.name, [], node.lineno, id(node) in top
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:  # relative: resolve against the package
        pkg = (
          module.split(".")[: -node.level]
          if not path.name == "__init__.py"
          else (module.split(".")[: len(module.split(".")) - node.level + 1])
        )
        base = ".".join(pkg + ([base] if base else []))
      names = [a.name for a in node.names]
      yield base, names, node.lineno, id(node) in top


def _ours(name: str) -> bool:
  return name.split(".")[0] in ("launch", "rl", "envs", "models", "parallel")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if not m.startswith("launch")))
def test_every_module_imports(module):
  importlib.import_module(module)


def test_every_launch_module_imports():
  """Each in its own process: launch modules define their absl flags when imported."""
  for m in sorted(m for m in MODULES if m.startswith("launch")):
    r = subprocess.run([sys.executable, "-c", f"import {m}"], cwd=ROOT, capture_output=True)
    assert r.returncode == 0, f"{m}: {r.stderr.decode()[-2000:]}"


def test_imports_go_one_way():
  bad = []
  for mod, path in MODULES.items():
    for name, names, line, _ in _imports(path, mod):
      targets = [name] + [f"{name}.{n}" for n in names if f"{name}.{n}" in MODULES]
      for t in filter(_ours, targets):
        if _layer(t) < _layer(mod):
          bad.append(f"{path.relative_to(ROOT)}:{line}: {mod} imports {t}")
  assert not bad, "\n".join(bad)


def test_no_private_name_imported_across_modules():
  files = {**MODULES}
  for extra in ("benchmarks", "configs"):  # tests may reach into a module they test
    for p in (ROOT / extra).glob("*.py"):
      files[f"{extra}.{p.stem}"] = p
  bad = []
  for mod, path in files.items():
    for name, names, line, _ in _imports(path, mod):
      if not _ours(name):
        continue
      priv = [n for n in names if n.startswith("_")] + [
        p for p in name.split(".") if p.startswith("_") and p != "__init__"
      ]
      if priv:
        bad.append(f"{path.relative_to(ROOT)}:{line}: {priv} from {name}")
  assert not bad, "\n".join(bad)


def test_no_circle_among_module_level_imports():
  graph = {}
  for mod, path in MODULES.items():
    deps = set()
    for name, names, _, top in _imports(path, mod):
      if not top:
        continue
      for t in [name] + [f"{name}.{n}" for n in names]:
        if t in MODULES and t != mod:
          deps.add(t)
    graph[mod] = deps
  state: dict[str, int] = {}
  cycles = []

  def visit(m, stack):
    state[m] = 1
    for d in sorted(graph[m]):
      if state.get(d) == 1:
        cycles.append(" -> ".join(stack[stack.index(d) :] + [d]))
      elif d not in state:
        visit(d, stack + [d])
    state[m] = 2

  for m in sorted(graph):
    if m not in state:
      visit(m, [m])
  assert not cycles, "\n".join(cycles)


def test_pure_core_loads_no_engine_and_no_envs():
  """The algorithm's pure modules (and the configs they read) load only JAX libraries, the
  policy in models/ and parallel/: no envs module, no engine, no checkpoint I/O, no runtime."""
  pure = ("rl.losses", "rl.train_step", "rl.advantages", "rl.batch")
  code = f"import sys, {', '.join(pure)}; print('\\n'.join(sorted(sys.modules)))"
  r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
  assert r.returncode == 0, r.stderr[-2000:]
  loaded = [m for m in r.stdout.split() if _ours(m)]
  banned = ("envs", "launch", "rl.runtime", "models.inference", "models.io")
  bad = [m for m in loaded if any(m == b or m.startswith(b + ".") for b in banned)]
  assert not bad, f"{', '.join(pure)} load {bad}"
  assert "rl.config" not in loaded and "ml_collections" not in r.stdout.split()
