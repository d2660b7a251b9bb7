"""rl.warm_start.warm_start on hand-made demonstrations (no sandbox): it fits them, and its
entropy bonus (sft.entropy_coef) leaves a broader policy whose mode is still the demonstration."""

import dataclasses

import jax
import numpy as np
import pytest

from models import transformer
from models.config import tiny
from rl import warm_start
from rl.config import Experiment, SFTConfig
from rl.runtime import multihost
from rl.runtime import run as rl_run

MODEL = tiny(
  "qwen3", vocab_size=32, d_model=32, n_layers=1, n_heads=2, head_dim=16, d_ff=64, max_seq_len=32
)


def _demos():
  """Four 12-token demonstrations: a 4-token prompt (no loss), then 8 action tokens."""
  rng = np.random.default_rng(0)
  out = []
  for _ in range(4):
    tokens = [int(t) for t in rng.integers(1, MODEL.vocab_size, 12)]
    out.append({"tokens": tokens, "loss_mask": [0] * 4 + [1] * 8})
  return out


def _stats(params, demos):
  """(mean NLL, mean entropy, fraction of argmax hits) over the demonstrations' loss tokens."""
  nll, ent, hit, n = 0.0, 0.0, 0, 0
  for d in demos:
    tokens = np.asarray(d["tokens"])[None]
    logits = np.asarray(transformer.apply(params, tokens, MODEL), np.float64)[0]
    m = logits.max(-1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(-1, keepdims=True))
    for t in range(1, len(d["tokens"])):
      if d["loss_mask"][t]:
        row = logp[t - 1]
        nll -= row[d["tokens"][t]]
        ent -= float((np.exp(row) * row).sum())
        hit += int(row.argmax() == d["tokens"][t])
        n += 1
  return nll / n, ent / n, hit / n


def _warm(entropy_coef: float):
  sft = SFTConfig(steps=60, batch_size=4, lr=1e-2, warmup_steps=5, entropy_coef=entropy_coef)
  exp = dataclasses.replace(Experiment(), model=MODEL, sft=sft, devices=1)
  exp = dataclasses.replace(exp, loop=dataclasses.replace(exp.loop, row_len=16, max_segments=1))
  params = jax.device_get(transformer.init(MODEL, jax.random.key(0)))
  out = warm_start.warm_start(
    exp, MODEL, rl_run.training_mesh(exp), params, _demos(), None, 0, multihost.Local()
  )
  return params, out.params


def test_warm_start_fits_and_entropy_bonus_keeps_the_policy_broad():
  demos = _demos()
  init, plain = _warm(0.0)
  _, broad = _warm(0.5)
  nll0, ent0, _ = _stats(init, demos)
  nll_p, ent_p, hit_p = _stats(plain, demos)
  nll_b, ent_b, hit_b = _stats(broad, demos)
  assert nll_p < 0.1 * nll0 and hit_p == 1.0  # the demonstrations are learnt
  assert hit_b == 1.0  # with the bonus the mode is still the demonstrated token ...
  assert ent_b > ent_p + 0.2 and nll_b > nll_p  # ... but the distribution stays broad
  assert ent_b < ent0  # and much sharper than the random init


def test_carry_moments_hands_rl_the_second_moments_only():
  import optax

  from rl.config import OptimConfig, TrainConfig
  from rl.train_state import create_train_state

  init = jax.device_get(transformer.init(MODEL, jax.random.key(0)))
  exp = dataclasses.replace(Experiment(), model=MODEL, devices=1)
  mesh = rl_run.training_mesh(exp)
  sft = SFTConfig(steps=6, batch_size=4, lr=1e-2, warmup_steps=2)
  exp = dataclasses.replace(exp, sft=sft)
  exp = dataclasses.replace(exp, loop=dataclasses.replace(exp.loop, row_len=16, max_segments=1))
  ws = warm_start.warm_start(exp, MODEL, mesh, init, _demos(), None, 0, multihost.Local())
  cfg = TrainConfig(optim=OptimConfig(lr=1e-3, warmup_steps=0))
  state, sh = create_train_state(MODEL, cfg, mesh, jax.random.key(0), params=ws.params)
  out = warm_start.carry_moments(state.opt_state, ws.opt_state, sh.opt_state)

  def adam(s):
    is_adam = lambda x: isinstance(x, optax.ScaleByAdamState)  # noqa: E731
    return next(x for x in jax.tree.leaves(s, is_leaf=is_adam) if is_adam(x))

  got, sft_adam = adam(jax.device_get(out)), adam(ws.opt_state)
  assert int(got.count) == 6  # the supervised steps taken: bias correction goes on from there
  jax.tree.map(np.testing.assert_array_equal, got.nu, sft_adam.nu)
  assert all(not np.any(x) for x in jax.tree.leaves(got.mu))  # no supervised direction
  assert any(np.any(x) for x in jax.tree.leaves(sft_adam.mu))
  sched = [x for x in jax.tree.leaves(jax.device_get(out)) if np.ndim(x) == 0]
  assert sorted(int(x) for x in sched) == [0, 6]  # the schedule's count starts at 0


def test_a_stopped_warm_start_resumes_to_the_uninterrupted_state(tmp_path):
  """Stopped after 3 of 8 steps (saved, as at Ctrl-C), then resumed from WORKDIR/warm_start by
  a fresh call: the same params and optimizer state, bitwise, as 8 steps in one go (the resumed
  steps draw the batches the uninterrupted run drew). kill -9 between saves loses only the
  steps since the last save: with checkpoint_every_s=0 each step is saved."""
  from rl.runtime.warm_checkpoints import WarmCheckpoints

  sft = SFTConfig(steps=8, batch_size=2, lr=1e-2, warmup_steps=2, checkpoint_every_s=1e9)
  exp = dataclasses.replace(Experiment(), model=MODEL, sft=sft, devices=1)
  exp = dataclasses.replace(exp, loop=dataclasses.replace(exp.loop, row_len=16, max_segments=1))
  mesh = rl_run.training_mesh(exp)
  init = jax.device_get(transformer.init(MODEL, jax.random.key(0)))
  demos = _demos()
  run = lambda stop=None, saves=None: warm_start.warm_start(  # noqa: E731
    exp, MODEL, mesh, init, demos, None, 0, multihost.Local(), stop, saves
  )
  whole = run()
  saves = WarmCheckpoints(tmp_path, sft.checkpoint_every_s)
  saves.save_demos(demos)
  calls = iter(range(100))
  run(stop=lambda: next(calls) >= 3, saves=saves)  # 3 steps, then "Ctrl-C"
  saves.close()
  assert [p.name for p in (tmp_path / "warm_start" / "checkpoints").iterdir()] == ["3"]
  again = WarmCheckpoints(tmp_path, sft.checkpoint_every_s)
  assert again.load_demos() == demos
  resumed = run(saves=again)
  again.close()
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(resumed), jax.device_get(whole))
  assert [p.name for p in (tmp_path / "warm_start" / "checkpoints").iterdir()] == ["8"]
  (tmp_path / "warm_start" / "demos.json").write_text("[]")  # other demonstrations now
  other = WarmCheckpoints(tmp_path, 0)
  other.load_demos()
  with pytest.raises(ValueError, match="other demonstrations than demos.json"):
    run(saves=other)
  other.remove()
  assert not (tmp_path / "warm_start").exists()


def test_a_missing_demonstration_shifts_no_other_batch(monkeypatch):
  """The warm start draws tasks' slots, not list positions: with two tasks' demonstrations
  missing, every step's batch is the full run's less those (before slots, every later batch
  drew differently), and a step that drew only missing tasks is skipped. Demos
  saved without slots (an older demos.json) still draw one slot per demonstration."""
  full = [{**d, "slot": i, "slots": 4} for i, d in enumerate(_demos())]
  sft = SFTConfig(steps=12, batch_size=2, lr=1e-2, warmup_steps=0)
  exp = dataclasses.replace(Experiment(), model=MODEL, sft=sft, devices=1)
  exp = dataclasses.replace(exp, loop=dataclasses.replace(exp.loop, row_len=16, max_segments=1))
  mesh = rl_run.training_mesh(exp)
  init = jax.device_get(transformer.init(MODEL, jax.random.key(0)))
  real = warm_start.sft_batch

  def batches(demos):
    seen = []
    monkeypatch.setattr(warm_start, "sft_batch", lambda seqs, *a: seen.append(
      [d["slot"] for d in seqs]) or real(seqs, *a))  # fmt: skip
    warm_start.warm_start(exp, MODEL, mesh, init, demos, None, 0, multihost.Local())
    return seen

  whole = batches(full)
  assert (
    len(whole) == 12
    and any(1 in b for b in whole)
    and {s for b in whole for s in b} == {0, 1, 2, 3}
  )
  less = batches([d for d in full if d["slot"] not in (1, 2)])
  want = [[s for s in b if s not in (1, 2)] for b in whole]
  assert less == [b for b in want if b]  # the same draws less the missing ones ...
  assert len(less) < len(whole)  # ... and a step that drew slots 1 and 2 only trained nothing
  legacy = [{k: v for k, v in d.items() if k not in ("slot", "slots")} for d in full]
  assert warm_start.demo_slots(legacy) == (4, {i: [d] for i, d in enumerate(legacy)})
  assert warm_start.demo_slots(full)[0] == 4


def test_a_last_step_with_no_demonstration_still_saves(tmp_path, monkeypatch):
  """A warm-start step whose draw holds only missing demonstrations trains nothing, but its
  checkpoint is still saved: on the last step that is the forced final save a resume needs."""
  from rl.runtime.warm_checkpoints import WarmCheckpoints

  full = [{**d, "slot": i, "slots": 4} for i, d in enumerate(_demos())]
  sft = SFTConfig(steps=1, batch_size=1, lr=1e-2, warmup_steps=0, checkpoint_every_s=1e9)
  exp = dataclasses.replace(Experiment(), model=MODEL, sft=sft, devices=1)
  exp = dataclasses.replace(exp, loop=dataclasses.replace(exp.loop, row_len=16, max_segments=1))
  mesh = rl_run.training_mesh(exp)
  init = jax.device_get(transformer.init(MODEL, jax.random.key(0)))
  real, seen = warm_start.sft_batch, []
  monkeypatch.setattr(warm_start, "sft_batch", lambda seqs, *a: seen.append(
    [d["slot"] for d in seqs]) or real(seqs, *a))  # fmt: skip
  warm_start.warm_start(exp, MODEL, mesh, init, full, None, 0, multihost.Local())
  (drawn,) = seen[0]  # the one step's one slot
  seen.clear()
  saves = WarmCheckpoints(tmp_path, sft.checkpoint_every_s)
  less = [d for d in full if d["slot"] != drawn]
  out = warm_start.warm_start(exp, MODEL, mesh, init, less, None, 0, multihost.Local(), None, saves)
  saves.close()
  assert seen == []  # the step drew only the missing demonstration: no update ...
  jax.tree.map(np.testing.assert_array_equal, jax.device_get(out.params), init)
  assert [p.name for p in (tmp_path / "warm_start" / "checkpoints").iterdir()] == ["1"]  # ... saved
