"""rl.runtime.telemetry.plot_curves: one PNG per metric group, rates on their own panel."""

import json

from rl.runtime.telemetry import plot_curves, split_panels


def test_rates_get_their_own_panel():
  values = {"eval/pass_rate": [0.3, 0.9], "eval/n": [64.0, 64.0], "eval/frac": [0.0, 1.0]}
  assert split_panels(values) == [["eval/pass_rate", "eval/frac"], ["eval/n"]]
  assert split_panels({"t/s": [3.0, 12.0]}) == [["t/s"]]
  assert split_panels({"r": [0.5]}) == [["r"]]


def test_plot_curves_writes_one_png_per_group(tmp_path):
  rows = [
    {"step": s, "eval/pass_rate": 0.3 + 0.1 * s, "eval/n": 64, "time/s": 2.0} for s in range(4)
  ]
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
  paths = plot_curves(tmp_path)
  assert sorted(p.name for p in paths) == ["eval.png", "time.png"]
  assert all(p.stat().st_size > 1000 for p in paths)
