"""models.lora / models.io.peft_io: the rank-r update against NumPy, merged == factorised,
only adapters train, sharded == single device, and PEFT export read back by `peft`."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import PartitionSpec as P

from models import config as mconfig
from models import lora, transformer
from models.io import hf, peft_io
from parallel import sharding
from parallel.mesh import MeshConfig, make_mesh
from parallel.rules import use_mesh_rules

CFG = mconfig.tiny("llama", vocab_size=64, n_kv_heads=2, max_seq_len=64)
LCFG = lora.LoraConfig(rank=3, alpha=6.0)


def _random_adapters(model_cfg, cfg, seed=1):
  """init's A, and a non-zero B (init's B is 0, which would hide every bug in B)."""
  adapters = lora.init(model_cfg, cfg, jax.random.key(seed))
  key = jax.random.key(seed + 100)
  return {
    leaf: {"a": ab["a"], "b": 0.3 * jax.random.normal(jax.random.fold_in(key, i), ab["b"].shape)}
    for i, (leaf, ab) in enumerate(sorted(adapters.items()))
  }


def _tokens(n=2, t=10, seed=0):
  return jnp.asarray(np.random.RandomState(seed).randint(0, CFG.vocab_size, (n, t)))


def test_delta_hand_case():
  a = jnp.array([[[1.0], [2.0]]])  # L=1, in=2, r=1
  b = jnp.array([[[3.0, 4.0]]])  # L=1, r=1, out=2
  np.testing.assert_array_equal(np.asarray(lora.delta(a, b)), [[[3.0, 4.0], [6.0, 8.0]]])


def test_merge_equals_naive_numpy():
  params = transformer.init(CFG, jax.random.key(0))
  adapters = _random_adapters(CFG, LCFG)
  merged = lora.merge(params, adapters, LCFG)
  assert sorted(adapters) == sorted(lora.ALL_LINEAR)
  for leaf, ab in adapters.items():
    w, a, b = (np.asarray(x, np.float64) for x in (params["layers"][leaf], ab["a"], ab["b"]))
    L, r = a.shape[0], a.shape[-1]
    a2, b2 = a.reshape(L, -1, r), b.reshape(L, r, -1)
    want = np.zeros(a2.shape[:2] + b2.shape[2:])
    for l in range(L):  # noqa: E741
      for i in range(a2.shape[1]):
        for o in range(b2.shape[2]):
          want[l, i, o] = sum(a2[l, i, k] * b2[l, k, o] for k in range(r))
    want = w + (6.0 / 3) * want.reshape(w.shape)
    np.testing.assert_allclose(np.asarray(merged["layers"][leaf]), want, atol=1e-6, rtol=0)
  # Untargeted leaves are the same arrays.
  assert merged["embed"] is params["embed"]
  assert merged["layers"]["attn_norm"] is params["layers"]["attn_norm"]


def test_init_starts_at_base_and_scales():
  params = transformer.init(CFG, jax.random.key(0))
  adapters = lora.init(CFG, LCFG, jax.random.key(1))
  merged = lora.merge(params, adapters, LCFG)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(merged), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  a_wq = np.asarray(adapters["wq"]["a"])
  assert a_wq.shape == (CFG.n_layers, CFG.d_model, 3) and np.abs(a_wq).max() <= CFG.d_model**-0.5
  assert adapters["wo"]["a"].shape == (CFG.n_layers, CFG.n_heads, CFG.head_dim, 3)
  assert adapters["wo"]["b"].shape == (CFG.n_layers, 3, CFG.d_model)
  assert lora.LoraConfig(rank=4, alpha=8.0, rslora=True).scale == 4.0
  assert lora.LoraConfig(rank=4, alpha=8.0).scale == 2.0


def test_targets_by_name_and_axis():
  res = lambda *t, cfg=CFG: lora.resolve_targets(cfg, t)
  assert res("axis:heads") == ("wo", "wq")
  assert res("axis:kv_heads") == ("wk", "wv")
  assert res("axis:mlp") == ("w_down", "w_gate", "w_up")
  assert res("q_proj", "wv") == ("wq", "wv")
  assert res("all-linear") == tuple(sorted(lora.ALL_LINEAR))
  # An MoE layer has no dense MLP: all-linear is attention only, an MLP target is an error.
  moe = mconfig.tiny("qwen3_moe")
  assert res("all-linear", cfg=moe) == ("wk", "wo", "wq", "wv")
  with pytest.raises(ValueError, match="'gate_proj': not a dense layer matrix"):
    res("gate_proj", cfg=moe)
  with pytest.raises(ValueError, match="no layer matrix has logical axis 'vocab'"):
    res("axis:vocab")
  with pytest.raises(ValueError, match="rank must be >= 0"):
    lora.LoraConfig(rank=-1)


def test_factorised_forward_equals_merged():
  params = transformer.init(CFG, jax.random.key(0))
  adapters = _random_adapters(CFG, LCFG)
  tokens = _tokens()
  merged = jax.jit(lambda p, a: transformer.apply(lora.merge(p, a, LCFG), tokens, CFG))
  factorised = jax.jit(lambda p, a: lora.apply(p, a, tokens, CFG, LCFG))
  want, got = merged(params, adapters), factorised(params, adapters)
  base = transformer.apply(params, tokens, CFG)
  assert float(jnp.max(jnp.abs(want - base))) > 1e-2  # the adapters do change the model
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5, rtol=0)


def _loss(params, adapters, tokens, wrap):
  logits = (
    lora.apply(params, adapters, tokens, CFG, LCFG)
    if wrap
    else transformer.apply(lora.merge(params, adapters, LCFG), tokens, CFG)
  )
  logp = jax.nn.log_softmax(logits[:, :-1])
  return -jnp.mean(jnp.take_along_axis(logp, tokens[:, 1:, None], axis=-1))


def test_factorised_gradient_equals_merged():
  params = transformer.init(CFG, jax.random.key(0))
  adapters, tokens = _random_adapters(CFG, LCFG), _tokens()
  g_fact = jax.grad(_loss, argnums=1)(params, adapters, tokens, True)
  g_merged = jax.grad(_loss, argnums=1)(params, adapters, tokens, False)
  for a, b in zip(jax.tree.leaves(g_fact), jax.tree.leaves(g_merged), strict=True):
    assert float(jnp.max(jnp.abs(b))) > 0
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=1e-4)


def test_only_adapters_change_after_optimizer_steps():
  params = transformer.init(CFG, jax.random.key(0))
  tree = {"base": params, "lora": lora.init(CFG, LCFG, jax.random.key(1))}
  tx = lora.freeze_base(optax.adam(1e-2))
  opt_state = tx.init(tree)
  # The frozen base keeps no optimizer state: every state array is adapter-sized.
  n_adapter = sum(x.size for x in jax.tree.leaves(tree["lora"]))
  assert sum(x.size for x in jax.tree.leaves(opt_state) if x.ndim) == 2 * n_adapter
  tokens = _tokens()
  loss = lambda t: _loss(t["base"], t["lora"], tokens, True)
  new = tree
  for _ in range(2):  # step 1 moves only B (dL/dA = 0 while B = 0), step 2 moves A too
    grads = jax.grad(loss)(new)
    updates, opt_state = tx.update(grads, opt_state, new)
    new = optax.apply_updates(new, updates)
  for a, b in zip(jax.tree.leaves(tree["base"]), jax.tree.leaves(new["base"]), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  for leaf in tree["lora"]:
    for part in ("a", "b"):
      old, cur = np.asarray(tree["lora"][leaf][part]), np.asarray(new["lora"][leaf][part])
      assert np.all(old != cur), (leaf, part)
  assert float(loss(new)) < float(loss(tree))


def test_sharded_on_8_devices_equals_single_device():
  mesh = make_mesh(MeshConfig(data=2, fsdp=2, tensor=2))
  axes = lora.adapter_axes(CFG, LCFG)
  abstract = jax.eval_shape(lambda: lora.init(CFG, LCFG, jax.random.key(1)))
  a_sh = sharding.param_shardings(axes, abstract, mesh)
  assert a_sh["wq"]["a"].spec == P(None, "fsdp", None)  # [L, D, r]: embed -> fsdp
  assert a_sh["wq"]["b"].spec == P(None, None, "tensor", None)  # [L, r, H, d]: heads -> tensor
  p_axes = transformer.param_axes(CFG)
  p_abs = jax.eval_shape(lambda: transformer.init(CFG, jax.random.key(0)))
  p_sh = sharding.param_shardings(p_axes, p_abs, mesh)
  init = jax.jit(lambda k: lora.init(CFG, LCFG, k), out_shardings=a_sh)
  params = transformer.init(CFG, jax.random.key(0))
  adapters = _random_adapters(CFG, LCFG)
  born_sharded = init(jax.random.key(1))
  assert born_sharded["wq"]["a"].sharding == a_sh["wq"]["a"]
  np.testing.assert_array_equal(
    np.asarray(born_sharded["wq"]["a"]), np.asarray(adapters["wq"]["a"])
  )
  tokens = _tokens(n=4)
  with use_mesh_rules(mesh):
    fwd = jax.jit(
      lambda p, a: (
        lora.apply(p, a, tokens, CFG, LCFG),
        transformer.apply(lora.merge(p, a, LCFG), tokens, CFG),
        lora.merge(p, a, LCFG),
      ),
      in_shardings=(p_sh, a_sh),
      out_shardings=(None, None, p_sh),
    )
    got_fact, got_merged, merged_sharded = fwd(
      jax.device_put(params, p_sh), jax.device_put(adapters, a_sh)
    )
  want = lora.apply(params, adapters, tokens, CFG, LCFG)
  np.testing.assert_allclose(np.asarray(got_fact), np.asarray(want), atol=1e-5, rtol=0)
  np.testing.assert_allclose(np.asarray(got_merged), np.asarray(want), atol=1e-5, rtol=0)
  assert merged_sharded["layers"]["wq"].sharding == p_sh["layers"]["wq"]


# ------------------------------------------------------------------ export


def test_peft_round_trip_and_layout(tmp_path):
  cfg = lora.LoraConfig(rank=2, alpha=4.0, targets=("q_proj", "o_proj", "down_proj"))
  adapters = _random_adapters(CFG, cfg)
  peft_io.save_adapters(tmp_path, CFG, adapters, cfg, base_model="base")
  raw = json.loads((tmp_path / "adapter_config.json").read_text())
  assert raw["peft_type"] == "LORA" and raw["r"] == 2 and raw["lora_alpha"] == 4.0
  assert raw["target_modules"] == ["down_proj", "o_proj", "q_proj"]
  from safetensors.numpy import load_file

  tensors = load_file(str(tmp_path / "adapter_model.safetensors"))
  D, H, d, F = CFG.d_model, CFG.n_heads, CFG.head_dim, CFG.d_ff
  pre = "base_model.model.model.layers.1."
  assert tensors[pre + "self_attn.q_proj.lora_A.weight"].shape == (2, D)
  assert tensors[pre + "self_attn.q_proj.lora_B.weight"].shape == (H * d, 2)
  assert tensors[pre + "self_attn.o_proj.lora_A.weight"].shape == (2, H * d)
  assert tensors[pre + "mlp.down_proj.lora_A.weight"].shape == (2, F)
  assert tensors[pre + "mlp.down_proj.lora_B.weight"].shape == (D, 2)
  assert len(tensors) == 2 * 3 * CFG.n_layers
  cfg2, adapters2 = peft_io.load_adapters(tmp_path, CFG)
  assert cfg2 == lora.LoraConfig(rank=2, alpha=4.0, targets=("down_proj", "o_proj", "q_proj"))
  for a, b in zip(jax.tree.leaves(adapters), jax.tree.leaves(adapters2), strict=True):
    np.testing.assert_array_equal(np.asarray(a), b)


def test_peft_load_errors(tmp_path):
  with pytest.raises(hf.CheckpointError, match="adapter_config.json: missing"):
    peft_io.load_adapters(tmp_path, CFG)
  peft_io.save_adapters(tmp_path, CFG, _random_adapters(CFG, LCFG), LCFG)
  with pytest.raises(
    hf.CheckpointError,
    match=r"layers.0.mlp.down_proj.lora_B.weight has shape \(64, 3\), expected \(32, 3\)",
  ):
    peft_io.load_adapters(tmp_path, CFG.replace(d_model=32))


def test_exports_load_in_peft_and_transformers(tmp_path):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  peft = pytest.importorskip("peft")
  params = transformer.init(CFG, jax.random.key(0))
  adapters = _random_adapters(CFG, LCFG)
  tokens = np.asarray(_tokens(n=1, t=12))
  want = np.asarray(lora.apply(params, adapters, jnp.asarray(tokens), CFG, LCFG))
  hf.save(tmp_path / "base", CFG, params)
  peft_io.save_adapters(tmp_path / "adapter", CFG, adapters, LCFG, base_model="base")
  peft_io.save_merged(tmp_path / "merged", CFG, params, adapters, LCFG)
  logits = lambda m: m(input_ids=torch.tensor(tokens)).logits.detach().numpy()
  base = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "base").eval()
  with_adapter = peft.PeftModel.from_pretrained(base, tmp_path / "adapter").eval()
  np.testing.assert_allclose(logits(with_adapter), want, atol=1e-4, rtol=0)
  merged = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "merged").eval()
  np.testing.assert_allclose(logits(merged), want, atol=1e-4, rtol=0)
