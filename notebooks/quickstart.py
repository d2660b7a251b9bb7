# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # agentrl quickstart: agentic RL on a CPU
#
# A tiny byte-level policy learns a terminal task in real bubblewrap sandboxes: a short
# supervised warm start on verified demonstrations, then GRPO on multi-turn tool-call
# episodes graded by hidden tests. This notebook runs the toy configuration end to end
# (about 4 minutes cold on 2 quiet CPU cores, ~1 minute with a warm compilation cache, longer
# under load); set `SIZE = "demo"` for the full demo (about 11 minutes).
#
# Set-up once per machine (Colab: run it in a cell with `!`): `bash launch/setup.sh`
# (installs bubblewrap and the package, builds the sandbox image).

# %%
import json
import os
import pathlib
import sys

# configs/ is a folder of the repository, not an installed package: find the repository from
# here (`python notebooks/quickstart.py` from the root, or Jupyter started in notebooks/).
REPO = next(p for p in (pathlib.Path.cwd(), pathlib.Path.cwd().parent) if (p / "configs").is_dir())
sys.path.insert(0, str(REPO))

from configs import demo, toy  # noqa: E402
from rl import config as rl_config  # noqa: E402
from rl.runtime import run as rl_run  # noqa: E402
from rl.runtime.telemetry import read_metrics, series  # noqa: E402
from rl.runtime.trajectory_store import TrajectoryStore  # noqa: E402

SIZE = os.environ.get("AGENTRL_NOTEBOOK_SIZE", "toy")  # "toy" | "demo"
WORKDIR = pathlib.Path(os.environ.get("AGENTRL_NOTEBOOK_WORKDIR", "/tmp/agentrl-quickstart"))

# %% [markdown]
# ## The experiment
# A config file is an `ml_collections.ConfigDict` mirroring `rl.config.Experiment`; any
# field can be changed here exactly as `--config.<path>=<value>` does on the command line.

# %%
cfg = (toy if SIZE == "toy" else demo).get_config()
if SIZE == "toy":
  cfg.loop.steps = int(os.environ.get("AGENTRL_NOTEBOOK_STEPS", cfg.loop.steps))
exp = rl_config.to_experiment(cfg)
print(exp.model)
print(exp.loop)

# %% [markdown]
# ## Train
# Progress bars show the warm start and the RL steps. Running this cell again with the same
# `WORKDIR` resumes from the last checkpoint (and returns at once if the run is complete).

# %%
summary = rl_run.run(exp, str(WORKDIR))
print(json.dumps({k: v for k, v in summary.items() if k != "plots"}, indent=1))

# %% [markdown]
# ## What happened
# Every trajectory is stored as Parquet (tokens, text, logprobs, rewards, timings, policy
# version); `metrics.jsonl` and TensorBoard (`tensorboard --logdir WORKDIR`) hold the curves.

# %%
table = TrajectoryStore(WORKDIR).read(["trajectory_id", "reward", "finish_reason", "text"])
print(f"{table.num_rows} trajectories")
for row in table.slice(max(0, table.num_rows - 3)).to_pylist():
  print(row["trajectory_id"], row["reward"], row["finish_reason"], repr(row["text"][:120]))

steps, rate = series(read_metrics(WORKDIR), "pass_rate/overall")
print("training pass rate by step:", dict(zip(steps.tolist(), rate.round(2).tolist(), strict=True)))

# %%
try:
  from IPython.display import Image, display

  for p in summary["plots"]:
    if pathlib.Path(p).stem in ("pass_rate", "eval"):
      display(Image(filename=p))
except ImportError:
  print("plots:", summary["plots"])
