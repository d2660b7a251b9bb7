"""The run's one progress bar: stages before RL relabel it, readable metric names, ETA."""

from rl.runtime.telemetry import Telemetry


def test_one_bar_through_the_stages(tmp_path, capsys):
  tel = Telemetry(tmp_path, total_steps=4, tensorboard=False)
  tel.phase("demonstrations (2 tasks)")
  tel.phase("warm start steps", total=10)
  tel.log(4, {"sft/nll": 1.25}, progress=False)
  err = capsys.readouterr().err
  assert "demonstrations (2 tasks)" in err and "warm start steps" in err
  assert "5/10" in err and "nll/token=1.25" in err
  tel.phase(None)
  tel.log(1, {"pass_rate/overall": 0.5, "reward/mean": 0.25}, show=("pass_rate/overall",))
  tel.log(2, {"pass_rate/overall": 0.75}, show=("pass_rate/overall",))
  tel.close(plot=False)
  err = capsys.readouterr().err.replace("\r", "\n").splitlines()
  last = [line for line in err if "RL steps" in line][-1]
  assert "2/4" in last and "pass rate=0.75" in last and "<" in last, last  # elapsed<ETA
  assert (tmp_path / "metrics.jsonl").read_text().count('"step"') == 2  # the RL steps
  from rl.runtime.telemetry import read_metrics

  assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2]  # no warm-start step among them
  (sft,) = read_metrics(tmp_path, "sft_step")
  assert sft["sft_step"] == sft["step"] == 4 and sft["sft/nll"] == 1.25
