"""notebooks/quickstart: the .py (percent format) and .ipynb are paired, and the notebook runs.

Regenerate the .ipynb after editing the .py with `jupytext --sync notebooks/quickstart.py`.
"""

import json
import os
import pathlib

NB_PY = pathlib.Path("notebooks/quickstart.py")
NB_IPYNB = pathlib.Path("notebooks/quickstart.ipynb")


def percent_cells(text: str) -> list[tuple[str, str]]:
  """(cell type, source) of a percent-format script, as jupytext reads it."""
  lines = text.splitlines()
  if lines and lines[0] == "# ---":  # the YAML header is notebook metadata, not a cell
    lines = lines[lines.index("# ---", 1) + 1 :]
  cells, kind, body = [], None, []

  def flush():
    if kind is not None:
      while body and not body[-1].strip():
        body.pop()
      while body and not body[0].strip():
        body.pop(0)
      cells.append((kind, "\n".join(body)))

  for line in lines:
    if line.startswith("# %%"):
      flush()
      kind, body = ("markdown" if "[markdown]" in line else "code"), []
    elif kind == "markdown":
      body.append(line[2:] if line.startswith("# ") else line.lstrip("#"))
    elif kind is not None:
      body.append(line)
  flush()
  return cells


def ipynb_cells(nb: dict) -> list[tuple[str, str]]:
  return [(c["cell_type"], "".join(c["source"])) for c in nb["cells"]]


def test_py_and_ipynb_are_in_sync():
  nb = json.loads(NB_IPYNB.read_text())
  assert nb["metadata"]["jupytext"]["formats"] == "ipynb,py:percent"
  assert percent_cells(NB_PY.read_text()) == ipynb_cells(nb)
  assert all(not c.get("outputs") for c in nb["cells"] if c["cell_type"] == "code")


def test_notebook_executes_at_toy_size(tmp_path, monkeypatch):
  monkeypatch.setenv("AGENTRL_NOTEBOOK_SIZE", "toy")
  monkeypatch.setenv("AGENTRL_NOTEBOOK_STEPS", "2")
  monkeypatch.setenv("AGENTRL_NOTEBOOK_WORKDIR", str(tmp_path / "run"))
  ns = {"__name__": "__main__"}
  for kind, src in ipynb_cells(json.loads(NB_IPYNB.read_text())):
    if kind == "code":
      exec(compile(src, str(NB_IPYNB), "exec"), ns)  # noqa: S102 (running the notebook is the test)
  assert ns["summary"]["step"] == 2
  assert ns["table"].num_rows >= 2 * 4 * 4  # 2 steps x 4 groups x 4 samples, at least
  assert (tmp_path / "run" / "plots" / "pass_rate.png").exists()
  assert os.path.exists(ns["summary"]["plots"][0])


def test_runs_as_a_script_from_the_repository_root(tmp_path):
  """`python notebooks/quickstart.py` as the README says: sys.path[0] is the script's folder,
  so `configs` (a repository folder, not a package) must be found by the notebook itself."""
  import subprocess
  import sys

  first = next(src for kind, src in percent_cells(NB_PY.read_text()) if kind == "code")
  script = tmp_path / "first_cell.py"
  script.write_text(first + "\nprint('imports ok', toy.__name__)\n")
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  out = subprocess.run(
    [sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env
  )
  assert out.returncode == 0 and "imports ok configs.toy" in out.stdout, out.stderr[-2000:]


def test_setup_installs_tensorboard_and_the_notebook_tools():
  import re

  text = pathlib.Path("setup.py").read_text()
  for pkg in ("tensorboard", "jupytext", "nbconvert", "ipykernel"):
    assert re.search(rf'"{pkg}==[0-9.]+"', text), pkg
  assert 'pip install -q -e ".[${EXTRAS}]"' in pathlib.Path("launch/setup.sh").read_text()
  assert 'EXTRAS="${AGENTRL_EXTRAS:-all}"' in pathlib.Path("launch/setup.sh").read_text()
