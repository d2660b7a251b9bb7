"""launch.compare_evals: pass@k per run and per family from launch.eval's results.json, a hand-
computed case, the plot, and a one-line error for a folder without results."""

import json
import subprocess
import sys

import pytest

from launch import compare_evals


def _trials(passes: dict[str, list[bool]]) -> list[dict]:
  return [
    dict(task_id=tid, suite="procedural", domain="text", difficulty=1, passed=p, masked=False)
    for tid, ps in passes.items()
    for p in ps
  ]


def _write(tmp_path, name, passes):
  d = tmp_path / name
  d.mkdir()
  (d / "results.json").write_text(json.dumps({"trials": _trials(passes)}))
  return d


def test_hand_computed_pass_at_k_and_table(tmp_path):
  a = _write(tmp_path, "a", {"procedural/echo_word-1": [True, False, False, False],
                             "procedural/sort_unique-2": [False] * 4})  # fmt: skip
  b = _write(tmp_path, "b", {"procedural/echo_word-1": [True] * 4,
                             "procedural/sort_unique-2": [True, True, False, False]})  # fmt: skip
  runs = {"A": compare_evals.load(a), "B": compare_evals.load(b)}
  ks, curves, lines = compare_evals.compare(runs, "family")
  assert ks == [1, 2, 4]
  # echo_word in A: 1 of 4 passed: pass@1 1/4, pass@2 1 - C(3,2)/C(4,2) = 1/2, pass@4 1.
  assert curves["A"]["echo_word"] == pytest.approx({1: 0.25, 2: 0.5, 4: 1.0})
  assert curves["A"]["all"] == pytest.approx({1: 0.125, 2: 0.25, 4: 0.5})
  # sort_unique in B: 2 of 4: pass@2 = 1 - C(2,2)/C(4,2) = 5/6.
  assert curves["B"]["sort_unique"][2] == pytest.approx(5 / 6)
  assert lines[0].startswith("| run | pass@1 | pass@2 | pass@4 | echo_word")
  assert lines[2] == "| A | 0.125 | 0.250 | 0.500 | 0.250 / 1.000 | 0.000 / 0.000 |"
  out = tmp_path / "c.png"
  compare_evals.plot(ks, curves, str(out))
  assert out.read_bytes()[:4] == b"\x89PNG"


def test_cli_errors_name_the_file(tmp_path):
  p = subprocess.run(
    [sys.executable, "-m", "launch.compare_evals", f"--runs=x={tmp_path}"],
    capture_output=True, text=True, timeout=120,
  )  # fmt: skip
  assert p.returncode != 0
  assert f"{tmp_path}/results.json: not a launch.eval results.json" in p.stderr
  assert "Traceback" not in p.stderr
