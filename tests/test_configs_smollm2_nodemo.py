"""configs/smollm2_nodemo.py: the D / N / U split keeps every reference solution of N and U out
of training (demonstrations come from D only, the builder refuses the others), held-out tasks
share no content with the pool, and the config runs end to end at tiny size with either
algorithm (real bwrap sandboxes, real verifier)."""

import dataclasses

import pytest
from test_configs_smollm2 import tiny_config

from configs import smollm2_nodemo
from envs.procedural import family
from rl import config as rl_config
from rl.runtime import run as rl_run
from rl.runtime.task_sources import content_key, make_task_source, parse_split
from rl.runtime.trajectory_store import TrajectoryStore
from rl.warm_start import demonstrations

D, N, U = (set(x.split(",")) for x in (smollm2_nodemo.D, smollm2_nodemo.N, smollm2_nodemo.U))


def test_split_keeps_n_and_u_solutions_out_of_training(tmp_path):
  assert len(N) >= 3 and len(U) >= 2 and not (D & N or D & U or N & U)
  exp = rl_config.to_experiment(smollm2_nodemo.get_config())
  src, evals = make_task_source(exp.env, 0, tmp_path, None)
  demos = src.demo_tasks(10_000)
  assert {family(t.id) for t in demos} == D and len(demos) == 64 * len(D)
  assert {family(t) for t in src.pool.tasks} == N and len(src.pool.tasks) == 64 * len(N)
  assert {family(t.id) for t in evals} == N | U and len(evals) == 4 * len(N | U)
  held = {content_key(t) for t in evals}
  assert not held & {content_key(t) for t in [*demos, *src.pool.tasks.values()]}
  assert src.decontamination["n_eval"] == 4 * len(U) and not src.decontamination["excluded"]
  # The warm start's builder refuses any N or U task before it runs a single episode.
  for task in (next(iter(src.pool.tasks.values())), evals[-1]):
    with pytest.raises(ValueError, match="families without demonstrations"):
      demonstrations([demos[0], task], None, None, 1, refuse=src.no_demo_families)
  # Another run seed samples differently but trains on the same pool and warm start.
  other, _ = make_task_source(exp.env, 1, tmp_path / "seed1", None)
  assert other.pool.tasks.keys() == src.pool.tasks.keys()
  assert [t.id for t in other.demo_tasks(128)] == [t.id for t in demos[:128]]


def test_parse_split_errors_name_the_problem():
  with pytest.raises(ValueError, match="more than one"):
    parse_split("split:D=echo_word;N=echo_word,find_ext;U=copy_pointer")
  with pytest.raises(ValueError, match="unknown procedural family 'nope'"):
    parse_split("split:D=echo_word;N=nope;U=copy_pointer")
  with pytest.raises(ValueError, match="needs non-empty"):
    parse_split("split:D=echo_word;N=find_ext")


@pytest.mark.parametrize("algorithm", ["grpo", "rft"])
def test_nodemo_config_on_a_tiny_model(tmp_path, algorithm):
  c = tiny_config()
  base = smollm2_nodemo.get_config()
  c.env.tasks, c.rollout.group_size = base.env.tasks, 2
  c.loop.algorithm, c.loop.steps, c.train.optim.decay_steps = algorithm, 1, 1
  exp = rl_config.to_experiment(c)
  summary = rl_run.run(exp, str(tmp_path))
  assert summary["step"] == 1
  rows = TrajectoryStore(tmp_path).read(["trajectory_id", "task_id", "passed"]).to_pylist()
  assert rows and {family(r["task_id"]) for r in rows} <= N  # RL samples N tasks only
  events = (tmp_path / "events.jsonl").read_text()
  assert '"kind": "demonstrations"' in events  # the warm start ran, on D's demonstrations
  trained = TrajectoryStore(tmp_path).read_batches().column("trajectory_id").to_pylist()
  if algorithm == "rft":  # only verified successes (a random model: usually none)
    passed = {r["trajectory_id"] for r in rows if r["passed"]}
    assert set(trained) <= passed
  else:
    assert len(trained) == exp.loop.batch_groups * exp.rollout.group_size
  assert dataclasses.asdict(exp)["loop"]["algorithm"] == algorithm


def test_arms_start_from_one_warm_start_workdir(tmp_path):
  """`checkpoint={sweep}/warm` (docs/results/nodemo.md): an arm skips the warm start and starts
  from the warm run's latest checkpoint, whose weights are its frozen base under LoRA."""
  import jax
  import numpy as np

  from rl.runtime import export

  c = tiny_config()
  c.env.tasks, c.loop.steps = smollm2_nodemo.get_config().env.tasks, 0
  rl_run.run(rl_config.to_experiment(c), str(tmp_path / "warm"))
  c.checkpoint, c.sft.steps, c.loop.steps, c.rollout.group_size = str(tmp_path / "warm"), 0, 1, 2
  exp = rl_config.to_experiment(c)
  assert rl_run.run(exp, str(tmp_path / "arm"))["step"] == 1
  assert '"kind": "demonstrations"' not in (tmp_path / "arm" / "events.jsonl").read_text()
  # LoRA: the arm's frozen base is the warm run's base (its untrained adapters are zero)
  _, _, warm = export.load_params(tmp_path / "warm", export.pick_step(tmp_path / "warm"))
  _, _, base = export.load_params(tmp_path / "arm", 1)
  want, got = (dict(jax.tree_util.tree_leaves_with_path(t)) for t in (warm, base))
  assert want.keys() == got.keys() and want
  for k in want:
    np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(want[k]), err_msg=str(k))
  c.checkpoint = str(tmp_path / "nothing")
  with pytest.raises(ValueError, match="not an HF folder"):
    rl_run.preflight(rl_config.to_experiment(c))
