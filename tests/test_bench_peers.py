"""benchmarks/peers: the interleaving protocol (a real child process) and the shape mapping."""

import json
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))

import peers  # noqa: E402
from peers import common  # noqa: E402

SERVE = "import common; n = [0]; common.serve({'a': lambda: n.__setitem__(0, n[0] + 1) or {'calls': n[0]}})"


def test_peer_serves_one_row_per_key_after_its_warm_up():
  with peers.Peer([sys.executable, "-c", SERVE]) as p:
    assert p.ready["ready"] and p.ready["keys"] == ["a"]
    assert p.run("a")["calls"] == 2  # the warm-up call was the first
    row = p.run("a")
    assert row["calls"] == 3 and len(row["load_average"]) == 3


def test_peer_unknown_key_and_exit_are_loud():
  with peers.Peer([sys.executable, "-c", SERVE]) as p:
    with pytest.raises(RuntimeError, match="unknown key 'b'"):
      p.run("b")
  with pytest.raises(RuntimeError, match=r"exited \(status 3\): .*boom"):
    peers.Peer([sys.executable, "-c", "import sys; print('boom', file=sys.stderr); sys.exit(3)"])


def test_shape_reaches_each_peer_under_its_names():
  from models import config

  cfg = config.qwen3_20m(n_layers=3, d_ff=1536)
  shape = json.loads(peers.shape_of(cfg))
  hf, tx = common.peer_fields(shape, "transformers"), common.peer_fields(shape, "tunix")
  assert (hf["num_hidden_layers"], tx["num_layers"]) == (3, 3)
  assert (hf["intermediate_size"], tx["hidden_dim"]) == (1536, 1536)
  assert hf["num_key_value_heads"] == tx["num_kv_heads"] == cfg.n_kv_heads
  assert hf["tie_word_embeddings"] == tx["use_tied_embedding"] == cfg.tie_embeddings
  assert len(hf) == len(tx) == len(peers.SHAPE_FIELDS)
