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


def test_sets_and_seed_means(tmp_path):
  a0 = _write(tmp_path, "a0", {"procedural/echo_word-1": [True, False], "procedural/find_ext-2": [False] * 2,
                               "procedural/rename_ext-3": [True, True]})  # fmt: skip
  a1 = _write(tmp_path, "a1", {"procedural/echo_word-1": [True, True], "procedural/find_ext-2": [True, False],
                               "procedural/rename_ext-3": [False, False]})  # fmt: skip
  runs = {"A": [compare_evals.load(a0), compare_evals.load(a1)], "A0": compare_evals.load(a0)}
  sets = compare_evals.parse_sets("N=echo_word+find_ext,U=rename_ext")
  assert sets == {"N": ["echo_word", "find_ext"], "U": ["rename_ext"]}
  ks, curves, lines = compare_evals.compare(runs, "family", sets)
  # seed 0: N pass@1 (1/2 + 0)/2 = 1/4; seed 1: (1 + 1/2)/2 = 3/4; the mean 1/2.
  assert curves["A0"]["N"][1] == pytest.approx(0.25)
  assert curves["A"]["N"][1] == pytest.approx(0.5)
  # U pass@2: seed 0 1, seed 1 0.
  assert curves["A"]["U"] == pytest.approx({1: 0.5, 2: 0.5})
  assert lines[0].startswith(
    "| run | pass@1 | pass@2 | N (pass@1 / pass@2) | U (pass@1 / pass@2) | echo_word"
  )
  out = tmp_path / "s.png"
  compare_evals.plot(ks, curves, str(out), tuple(sets))
  assert out.read_bytes()[:4] == b"\x89PNG"
  with pytest.raises(ValueError, match="N names \\['nope'\\]"):
    compare_evals.compare(runs, "family", {"N": ["nope"]})
  with pytest.raises(ValueError, match="--sets: expected name=group"):
    compare_evals.parse_sets("N")


def test_cli_errors_name_the_file(tmp_path):
  p = subprocess.run(
    [sys.executable, "-m", "launch.compare_evals", f"--runs=x={tmp_path}"],
    capture_output=True, text=True, timeout=120,
  )  # fmt: skip
  assert p.returncode != 0
  assert f"{tmp_path}/results.json: not a launch.eval results.json" in p.stderr
  assert "Traceback" not in p.stderr
