"""Every README snippet is a runnable file under examples/; each runs here at its tiny size.

In-process (runpy) to reuse this process's JAX: the same code `python examples/X.py` runs.
"""

import pathlib
import re
import runpy

import numpy as np
import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py"))
SERVED = {"openai_client_agent.py"}  # needs a served model: tests/test_gateway_harness.py


def _main(name: str):
  return runpy.run_path(str(ROOT / "examples" / name), run_name="example")["main"]


def test_readme_shows_every_example():
  readme = (ROOT / "README.md").read_text()
  assert [n for n in EXAMPLES if f"examples/{n}" not in readme] == []


def test_readme_links_resolve():
  """The README is read on GitHub, outside `mkdocs build --strict`: its relative links
  (into docs/, benchmarks/) must name files that exist."""
  links = re.findall(r"\]\(([^)\s]+)\)", (ROOT / "README.md").read_text())
  local = [u.split("#")[0] for u in links if "://" not in u and not u.startswith("#")]
  assert local and [u for u in local if not (ROOT / u).is_file()] == []


def test_update_step():
  metrics = _main("update_step.py")()
  assert metrics["n_seqs"] == 8 and np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0


def test_hf_checkpoint():
  assert _main("hf_checkpoint.py")().shape[-1] == 260


def test_engine():
  res, again = _main("engine.py")()
  assert len(res.tokens) == 8 and set(res.versions) == {0}
  assert set(again.versions) == {3} and again.cached_prefix_len > 0


def test_sandbox():
  _main("sandbox.py")("bwrap")


def test_tasks_and_verifier():
  results = _main("tasks_and_verifier.py")("bwrap")
  assert [passed for _, _, passed in results] == [True, True, False]


@pytest.mark.parametrize("name", sorted(set(EXAMPLES) - SERVED))
def test_every_example_is_tested(name):
  assert f"test_{name[:-3]}" in globals(), f"examples/{name} has no test here"


def test_task_pool():
  drawn = _main("task_pool.py")()
  assert len(drawn) >= 5 and sum(drawn.values()) == 64  # every domain listed, so all are drawn


def test_lora_export(tmp_path):
  res = _main("lora_export.py")(str(tmp_path))
  assert res["rank"] == 4 and res["b_max"] > 0  # the step moved B off its zero start
  assert res["merged_err"] <= 1e-6 and res["adapter_err"] == 0.0
  assert (tmp_path / "adapter" / "adapter_config.json").exists()


def test_gateway_harness():
  run = _main("gateway_harness.py")
  out = run("tiny")  # a real Generator behind the HTTP API: graded, captured, not solved
  assert out.infra_error is None and not out.passed
  assert out.harness_result["exit_status"] == "LimitsExceeded"
  ep = out.episode
  assert ep.generated_tokens > 0 and len(ep.segments) == 2 and ep.elisions == 1
  for seg in ep.segments:
    policy = [
      (lp, v) for lp, v, m in zip(seg.logprobs, seg.versions, seg.loss_mask, strict=True) if m
    ]
    assert policy and all(lp <= 0 and v == 0 for lp, v in policy)
  solved = run("oracle")  # mini-swe-agent's bash tool replaying the reference solution
  assert solved.passed and solved.reward == 1.0 and solved.episode.elisions == 0
