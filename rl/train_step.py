"""The jitted, sharded GRPO-family update: `train_step(state, batch) -> (state, metrics)`.

Legend: B rows, T tokens per row, S sequence slots per row, M micro-batches, N LM-head
positions per row.

Batch format (a flat dict of NumPy arrays built by the host loop; rl.packing.pack builds it):
  tokens_BT              int32  token ids; padding anywhere with segment id 0
  segment_ids_BT         int32  1..S for the sequences packed into a row, 0 = padding
  positions_BT           int32  position of each token within its own sequence (0-based)
  loss_mask_BT           float  1 where the token was produced by the policy (gets a loss)
  behaviour_logprobs_BT  float  optional; log-prob the engine sampled token t with, aligned
                                like loss_mask (entry t scores tokens[t]). Missing: on-policy
                                (old = the current policy, no gradient through it).
  rewards_BS, group_ids_BS      per-sequence reward and prompt group (slot s = segment s+1);
    or advantages_BS            final advantages instead, taken as they are (rl.batch builds
                                them with the same rl.advantages.from_rewards)
  truncated_BS           bool   optional; the response hit the length limit (overlong='mask')
  prox_logprobs_BT       float  optional (decoupled PPO): proximal log-probs from
                                `compute_logprobs` before several mini-batch updates; missing:
                                the params at the start of this step (stop-gradient, no extra
                                forward), which is exact for one update per rollout batch
  ref_logprobs_BT        float  optional; reference log-probs (else computed from
                                state.ref_params when LossConfig.kl != 'none')
The first token of a sequence never gets a loss (nothing predicts it). B must divide by the
batch mesh axes and by TrainConfig.micro_batches.

Micro-batches take rows m, m+M, m+2M, ... so each one is spread over every data shard. All
denominators (token and sequence counts) and the advantages come from the whole batch, so the
accumulated gradient equals the gradient of one big batch.

Work skipped without changing a result (`rl.layout` reads it off each host batch, a static
argument of the jitted step): the LM head and log-softmax run only at n_logits positions per
row covering every loss token (one of TrainConfig.logit_buckets lengths; log-probs outside the
loss mask are then 0), and when groups of rows share a prompt prefix (GRPO's G samples, one
sequence per row) it runs once per group (`models.shared_prefix`, TrainConfig.share_prefixes).
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh

from models import shared_prefix, transformer
from models.config import ModelConfig
from parallel import sharding
from parallel.rules import constrain, merge_rules, use_mesh_rules
from rl import advantages as adv_lib
from rl import losses
from rl.layout import Layout, plan
from rl.train_config import LossConfig, TrainConfig
from rl.train_state import (
  TrainState,
  lr_schedule,
  make_optimizer,
  model_params,
  reference_params,
  trainable_axes,
)

_NAMES = {"T": ("batch", "length"), "S": ("batch", "segments")}
_PER_TOKEN_INPUTS = (
  "tokens_BT",
  "positions_BT",
  "segment_ids_BT",
  "behaviour_logprobs_BT",
  "prox_logprobs_BT",
  "ref_logprobs_BT",
)


def target_mask(segment_ids_BT):
  """1 where token t continues the sequence of token t-1 (so the logits at t-1 predict it)."""
  seg = segment_ids_BT
  same_BT = (seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] > 0)
  return jnp.pad(same_BT, ((0, 0), (1, 0))).astype(jnp.float32)


def pick_index(select_BT, n: int):
  """Per row, n distinct token indices: every t with select_BT[b, t] > 0, then fillers."""
  return jnp.argsort(select_BT <= 0, axis=1, stable=True)[:, :n].astype(jnp.int32)


def _logits(params, batch, model_cfg: ModelConfig, layout: Layout, index_BN=None):
  """(logits [B, T or N, V], moe aux loss) of the batch in the given layout."""
  kw = dict(positions_BT=batch["positions_BT"], segment_ids_BT=batch["segment_ids_BT"])
  tokens_BT = batch["tokens_BT"]
  if layout.group > 1:
    g, p = layout.group, layout.prefix
    logits = shared_prefix.apply(params, tokens_BT, model_cfg, g, p, logit_index_BN=index_BN, **kw)
    return logits, jnp.zeros((), jnp.float32)  # dense models only
  logits, aux = transformer.apply(
    params, tokens_BT, model_cfg, return_aux=True, logit_index_BN=index_BN, **kw
  )
  return logits, aux["moe_aux_loss"]


def forward_logprobs(
  params, batch, model_cfg: ModelConfig, with_entropy: bool, layout=Layout(), select_BT=None,
  temperature: float = 1.0,
):  # fmt: skip
  """(logp_BT, entropy_BT or None, moe aux loss) of the batch's tokens under `params`, the
  logits divided by `temperature` (the sampling distribution's log-probs and entropy).

  With layout.n_logits, the LM head runs only at n_logits positions per row covering every t
  with select_BT[b, t] > 0 (at most n_logits per row); logp and entropy are 0 at the others.
  """
  tokens_BT = batch["tokens_BT"]
  scale = (lambda x: x) if temperature == 1.0 else (lambda x: x.astype(jnp.float32) / temperature)
  if layout.n_logits is None:
    logits_BTV, aux = _logits(params, batch, model_cfg, layout)
    logits_BTV = scale(logits_BTV)
    logp_BT, ent_BT = losses.token_logprobs(logits_BTV, tokens_BT, with_entropy)
  else:
    idx_BN = pick_index(select_BT, layout.n_logits)  # token t is scored by the logits at t - 1
    logits_BNV, aux = _logits(params, batch, model_cfg, layout, jnp.maximum(idx_BN - 1, 0))
    logits_BNV = scale(logits_BNV)
    targets_BN = jnp.take_along_axis(tokens_BT, idx_BN, axis=1)
    logp_BN, ent_BN = losses.target_logprobs(logits_BNV, targets_BN, with_entropy)
    zeros_T = jnp.zeros(tokens_BT.shape[1], jnp.float32)
    scatter = jax.vmap(lambda i_N, x_N: zeros_T.at[i_N].set(x_N))
    to_tokens = lambda x_BN: scatter(idx_BN, jnp.where(idx_BN > 0, x_BN, 0.0))
    logp_BT, ent_BT = to_tokens(logp_BN), None if ent_BN is None else to_tokens(ent_BN)
  # apply returns HF's load-balancing loss unscaled; 0 for dense models.
  return logp_BT, ent_BT, aux * model_cfg.router_aux_coef


def compute_logprobs(
  params, batch, model_cfg: ModelConfig, layout=Layout(), temperature: float = 1.0
):
  """Proximal / reference forward: log-probs (of logits / temperature) aligned with the
  tokens, 0 where none.

  With layout.n_logits only at loss_mask_BT tokens, 0 elsewhere.
  """
  keep_BT = target_mask(batch["segment_ids_BT"])
  if layout.n_logits is not None:
    keep_BT = keep_BT * (batch["loss_mask_BT"] > 0)
  logp_BT, _, _ = forward_logprobs(params, batch, model_cfg, False, layout, keep_BT, temperature)
  return jax.lax.stop_gradient(logp_BT) * keep_BT


def prepare(batch, cfg: LossConfig):
  """Whole-batch quantities: final loss mask, advantages_BS, denominators, stats."""
  n_slots = next(v.shape[1] for k, v in batch.items() if k.endswith("_BS"))
  segs = losses.Segments.make(batch["segment_ids_BT"], n_slots)
  valid_BS = segs.sum(jnp.ones_like(batch["loss_mask_BT"], jnp.float32)) > 0
  mask_BT = batch["loss_mask_BT"].astype(jnp.float32) * target_mask(batch["segment_ids_BT"])
  len_BS = segs.sum(mask_BT)  # policy tokens per sequence
  if cfg.overlong == "mask":
    if "truncated_BS" not in batch:
      raise ValueError("LossConfig.overlong='mask' needs truncated_BS in the batch")
    mask_BT = mask_BT * (1.0 - segs.to_tokens(batch["truncated_BS"].astype(jnp.float32)))
  if "advantages_BS" in batch:  # final (rl.batch ran the same from_rewards on the host)
    adv_BS = jnp.where(valid_BS, batch["advantages_BS"].astype(jnp.float32), 0.0)
    rew_BS = jnp.zeros_like(adv_BS)
  else:
    flat = lambda x: x.reshape(-1)
    rew_N, adv_N = adv_lib.from_rewards(
      cfg, flat(batch["rewards_BS"]), flat(batch["group_ids_BS"]), flat(valid_BS), flat(len_BS)
    )
    rew_BS, adv_BS = rew_N.reshape(len_BS.shape), adv_N.reshape(len_BS.shape)
  live_BS = valid_BS & (segs.sum(mask_BT) > 0)
  norm = cfg.norm_length or batch["tokens_BT"].shape[1]
  denoms = losses.Denoms(mask_BT.sum(), live_BS.sum().astype(jnp.float32), jnp.float32(norm))
  return mask_BT, adv_BS, denoms, _seq_stats(adv_BS, rew_BS, valid_BS, len_BS)


def _seq_stats(adv_BS, rew_BS, valid_BS, len_BS):
  n = jnp.maximum(valid_BS.sum(), 1).astype(jnp.float32)
  mean = lambda x: jnp.where(valid_BS, x, 0.0).sum() / n
  adv_mean = mean(adv_BS)
  return {
    "adv_mean": adv_mean,
    "adv_std": jnp.sqrt(mean(jnp.square(adv_BS - adv_mean))),
    "adv_max": jnp.where(valid_BS, adv_BS, -jnp.inf).max(),
    "adv_min": jnp.where(valid_BS, adv_BS, jnp.inf).min(),
    "reward_mean": mean(rew_BS),
    "response_len_mean": mean(len_BS),
    "n_seqs": valid_BS.sum().astype(jnp.float32),
  }


def micro_loss(
  params, mb, ref_params, denoms, model_cfg: ModelConfig, cfg: LossConfig, layout=Layout(),
  temperature: float = 1.0,
):  # fmt: skip
  """Loss of one micro-batch (its share of the whole-batch loss) and metric sums; every
  log-prob (policy, reference) is of logits / `temperature`, the rollouts' sampling one."""
  with_ent = cfg.compute_entropy or cfg.entropy_coef != 0.0
  logp_BT, ent_BT, aux_loss = forward_logprobs(
    params, mb, model_cfg, with_ent, layout, mb["loss_mask_BT"], temperature
  )
  cur_sg = jax.lax.stop_gradient(logp_BT)
  segs = losses.Segments.make(mb["segment_ids_BT"], mb["advantages_BS"].shape[1])
  inputs = {
    "loss_mask_BT": mb["loss_mask_BT"],
    "advantages_BT": segs.to_tokens(mb["advantages_BS"]),
    "old_logprobs_BT": mb.get("behaviour_logprobs_BT", cur_sg),
    "prox_logprobs_BT": mb.get("prox_logprobs_BT", cur_sg),
  }
  if cfg.kl != "none":
    ref = mb.get("ref_logprobs_BT")
    inputs["ref_logprobs_BT"] = (
      ref if ref is not None else compute_logprobs(ref_params, mb, model_cfg, layout, temperature)
    )
  loss, metrics = losses.loss_from_logprobs(logp_BT, ent_BT, inputs, segs, denoms, cfg)
  metrics["sum"]["moe_aux_loss"] = jax.lax.stop_gradient(aux_loss)
  return loss + aux_loss * denoms.aux_weight, metrics


def _split(batch, m: int):
  """[B, ...] -> [M, B/M, ...] taking rows m, m+M, ... into micro-batch m."""
  return {
    k: jnp.swapaxes(v.reshape(v.shape[0] // m, m, *v.shape[1:]), 0, 1) for k, v in batch.items()
  }


def _combine(acc, new):
  grads = jax.tree.map(jnp.add, acc[0], new[0])
  met = {
    "sum": jax.tree.map(jnp.add, acc[2]["sum"], new[2]["sum"]),
    "max": jax.tree.map(jnp.maximum, acc[2]["max"], new[2]["max"]),
    "min": jax.tree.map(jnp.minimum, acc[2]["min"], new[2]["min"]),
  }
  return grads, acc[1] + new[1], met


def _identity_like(shapes):
  """The neutral element of _combine: zeros for sums, -inf for maxima, +inf for minima."""
  full = lambda v: lambda s: jnp.full(s.shape, v, s.dtype)
  grads, loss, met = shapes
  return (
    jax.tree.map(full(0.0), grads),
    full(0.0)(loss),
    {
      "sum": jax.tree.map(full(0.0), met["sum"]),
      "max": jax.tree.map(full(-jnp.inf), met["max"]),
      "min": jax.tree.map(full(jnp.inf), met["min"]),
    },
  )


def accumulate(
  params, ref_params, batch, denoms, model_cfg, cfg: TrainConfig, layout=Layout(), frozen=None,
  temperature: float = 1.0,
):  # fmt: skip
  """Sum of gradients, losses and metric sums over the micro-batches (lax.scan when M > 1).

  Gradients are of `params` (the adapters under LoRA, applied over the `frozen` base).
  """

  def loss_of(trainable, mb):
    policy = model_params(trainable, frozen, cfg)
    return micro_loss(policy, mb, ref_params, denoms, model_cfg, cfg.loss, layout, temperature)

  grad_fn = jax.value_and_grad(loss_of, has_aux=True)

  def run(mb):
    (loss, met), grads = grad_fn(params, mb)
    return grads, loss, met

  m = cfg.micro_batches
  if m == 1:
    return run(batch)
  micro = _split(batch, m)

  def body(acc, mb):
    mb = {k: constrain(v, _NAMES[k[-1]]) for k, v in mb.items()}
    return _combine(acc, run(mb)), None

  init = _identity_like(jax.eval_shape(run, jax.tree.map(lambda x: x[0], micro)))
  acc, _ = jax.lax.scan(body, init, micro)
  return acc


def compute_grads(
  params, ref_params, batch, model_cfg: ModelConfig, cfg: TrainConfig, layout=Layout(), frozen=None,
  temperature: float = 1.0,
):  # fmt: skip
  """(grads, loss, metrics) of a whole batch, accumulated over cfg.micro_batches.

  layout: the batch's `rl.layout.plan` (or plain); frozen: the LoRA base (TrainState.frozen);
  temperature: the logits are divided by it (the rollouts' sampling one, agent.temperature).
  """
  mask_BT, adv_BS, denoms, stats = prepare(batch, cfg.loss)
  denoms = denoms._replace(aux_weight=jnp.float32(1.0 / cfg.micro_batches))
  work = {k: v for k, v in batch.items() if k in _PER_TOKEN_INPUTS}
  work.update(loss_mask_BT=mask_BT, advantages_BS=adv_BS)
  grads, loss, met = accumulate(
    params, ref_params, work, denoms, model_cfg, cfg, layout, frozen, temperature
  )
  n_tok = jnp.maximum(denoms.n_tokens, 1.0)
  metrics = {k: v / n_tok for k, v in met["sum"].items() if k != "moe_aux_loss"}
  metrics["moe_aux_loss"] = met["sum"]["moe_aux_loss"] / cfg.micro_batches
  metrics.update({f"{k}_max": v for k, v in met["max"].items()})
  metrics.update({f"{k}_min": v for k, v in met["min"].items()})
  metrics.update(stats, loss=loss, n_tokens=denoms.n_tokens, grad_norm=optax.tree.norm(grads))
  return grads, loss, metrics


def train_step(
  state: TrainState, batch, layout=Layout(), *, model_cfg: ModelConfig, cfg: TrainConfig,
  mesh: Mesh, temperature: float = 1.0,
):  # fmt: skip
  """One optimizer update from one batch (format in the module docstring), its log-probs
  scored at the rollouts' sampling `temperature`."""
  with use_mesh_rules(mesh, merge_rules(overrides=cfg.rules)):
    ref = reference_params(state, cfg)
    grads, _, metrics = compute_grads(
      state.params, ref, batch, model_cfg, cfg, layout, state.frozen, temperature
    )
    tx = make_optimizer(cfg.optim, trainable_axes(model_cfg, cfg))
    updates, opt_state = tx.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
  metrics["lr"] = lr_schedule(cfg.optim)(state.step)
  new_state = state.replace(step=state.step + 1, params=params, opt_state=opt_state)
  return new_state, metrics


class PlannedStep:
  """A jitted `train_step` called with the static `rl.layout.plan` of each host batch."""

  def __init__(self, jitted, plan_fn):
    self.jitted, self.plan = jitted, plan_fn

  def __call__(self, state, batch):
    return self.jitted(state, batch, self.plan(batch))

  def trace(self, state, batch):
    return self.jitted.trace(state, batch, self.plan(batch))

  def lower(self, state, batch):
    return self.jitted.lower(state, batch, self.plan(batch))

  def _cache_size(self) -> int:
    return self.jitted._cache_size()


def _planner(model_cfg, cfg: TrainConfig, mesh: Mesh, rows_sharding, loss_only=True):
  """batch -> Layout; plain on a sequence-sharded mesh (picking would gather the length)."""
  if mesh.shape.get("sequence", 1) > 1:
    return lambda batch: Layout()
  spec = rows_sharding.spec[0] if rows_sharding.spec else None
  axes = (spec,) if isinstance(spec, str) else tuple(spec or ())
  shards = math.prod(mesh.shape[a] for a in axes) * cfg.micro_batches

  def plan_of(batch):
    block = batch["tokens_BT"].shape[0] // shards
    return plan(batch, cfg, model_cfg, block, loss_only)

  return plan_of


def make_train_step(
  model_cfg: ModelConfig,
  cfg: TrainConfig,
  mesh: Mesh,
  state_shardings,
  batch_like,
  compiler_options=None,
  temperature: float = 1.0,
) -> PlannedStep:
  """jit(train_step) with in/out shardings and the state donated.

  temperature: the one the rollouts sampled at (agent.temperature, its one owner); 1 for
  demonstrations.

  batch_like: a batch (or a dict of ShapeDtypeStructs) with the keys and shapes every call
  will use; a batch of other keys or shapes compiles again, as does each new `rl.layout`
  Layout (a few per run). compiler_options go to XLA (the tests pass
  {"xla_backend_optimization_level": 0} to halve CPU compile time).
  """
  rules = merge_rules(overrides=cfg.rules)
  b_sh = sharding.batch_shardings(batch_like, mesh, rules)
  if cfg.micro_batches < 1 or batch_like["tokens_BT"].shape[0] % cfg.micro_batches:
    raise ValueError(
      f"TrainConfig.micro_batches={cfg.micro_batches} must be >= 1 and divide the "
      f"{batch_like['tokens_BT'].shape[0]} rows of the batch"
    )
  fn = functools.partial(
    train_step, model_cfg=model_cfg, cfg=cfg, mesh=mesh, temperature=temperature
  )
  jitted = jax.jit(
    fn,
    in_shardings=(state_shardings, b_sh),
    out_shardings=(state_shardings, sharding.replicated(mesh)),
    static_argnums=(2,),
    donate_argnums=(0,),
    compiler_options=compiler_options,
  )
  return PlannedStep(jitted, _planner(model_cfg, cfg, mesh, b_sh["tokens_BT"]))


def make_compute_logprobs(
  model_cfg: ModelConfig,
  cfg: TrainConfig,
  mesh: Mesh,
  param_shardings,
  batch_like,
  loss_only: bool = False,
  temperature: float = 1.0,
):
  """jit(compute_logprobs) for the proximal or reference forward of a host batch, scored at
  the rollouts' sampling `temperature`.

  loss_only: log-probs only at loss_mask_BT tokens (0 elsewhere), the LM head run only there
  (as in the update); all a loss ever reads. Shared prompt prefixes run once either way.
  """
  rules = merge_rules(overrides=cfg.rules)
  keys = ("tokens_BT", "positions_BT", "segment_ids_BT") + (("loss_mask_BT",) if loss_only else ())
  b_sh = sharding.batch_shardings({k: batch_like[k] for k in keys}, mesh, rules)
  one_pass = dataclasses.replace(cfg, micro_batches=1)
  plan_of = _planner(model_cfg, one_pass, mesh, b_sh["tokens_BT"], loss_only)

  def fn(params, batch, layout):
    with use_mesh_rules(mesh, rules):
      return compute_logprobs(params, batch, model_cfg, layout, temperature)

  jitted = jax.jit(
    fn,
    in_shardings=(param_shardings, b_sh),
    out_shardings=b_sh["tokens_BT"],
    static_argnums=(2,),
  )

  def logprobs(params, batch):
    batch = {k: batch[k] for k in keys}
    return jitted(params, batch, plan_of(batch))

  return logprobs
