"""The real entry point: `python -m launch.serve --api=openai` serves a saved checkpoint on
127.0.0.1 and answers the `openai` client."""

import socket
import subprocess
import sys
import time

import httpx
import jax
import openai
from procs import with_parent

from models import config
from models import transformer as tfm
from models.io import hf


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def test_serve_openai_entry_point(tmp_path):
  cfg = config.tiny("qwen3", vocab_size=260, max_seq_len=128)
  hf.save(tmp_path / "ckpt", cfg, tfm.init(cfg, jax.random.PRNGKey(0)))
  port = _free_port()
  cmd = [sys.executable, "-m", "launch.serve", "--api=openai", f"--checkpoint={tmp_path / 'ckpt'}",
         f"--port={port}", "--max_concurrent_decodes=2", "--model_name=tiny"]  # fmt: skip
  proc = subprocess.Popen(
    with_parent(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
  )
  try:
    url, deadline = f"http://127.0.0.1:{port}/v1", time.monotonic() + 240
    while True:  # readiness: the first answer of /v1/models, or a loud failure
      assert proc.poll() is None, proc.stdout.read()
      assert time.monotonic() < deadline, "server did not come up within 240 s"
      try:
        if httpx.get(f"{url}/models", timeout=5).status_code == 200:
          break
      except httpx.TransportError:
        time.sleep(0.5)
    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0)
    r = client.chat.completions.create(
      model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=5, temperature=0
    )
    assert r.usage.completion_tokens >= 1 and r.choices[0].finish_reason in ("stop", "length")
  finally:
    proc.terminate()
    proc.wait(timeout=60)


def test_openai_server_takes_a_training_workdir(tmp_path):
  """`--checkpoint=WORKDIR` (as the README says of launch.serve) is exported once and served."""
  import dataclasses
  import json

  from launch import serve
  from rl.config import Experiment, TrainConfig
  from rl.runtime.checkpoint import Checkpointer
  from rl.runtime.run import training_mesh
  from rl.train_state import create_train_state

  cfg = config.tiny("qwen3", vocab_size=260, max_seq_len=64, attention="naive")
  exp, wd = Experiment(model=cfg, train=TrainConfig()), tmp_path / "run"
  wd.mkdir()
  (wd / "experiment.json").write_text(json.dumps(dataclasses.asdict(exp), default=str))
  state, _ = create_train_state(cfg, exp.train, training_mesh(exp), jax.random.key(0))
  ckpt = Checkpointer(wd / "checkpoints", every_steps=1, keep=1)
  ckpt.save(1, state, {"step": 1})
  ckpt.close()
  gw, gen = serve.build_gateway(str(wd), max_concurrent_decodes=1)
  try:
    assert gw.model_name == "step-1" and (wd / "export" / "step-1" / "config.json").is_file()
  finally:
    gen.close()
