"""The README's task and verifier snippets, runnable: load tasks, grade the oracle in a sandbox.

python examples/tasks_and_verifier.py [bwrap|docker]
"""

import sys

from envs import procedural
from envs.agents.scripted import NullAgent, OracleAgent
from envs.formats.loading import load_tasks
from envs.grading.verifier import Verifier, VerifierConfig
from envs.task_env import open_task_sandbox


def grade(task, agent, backend: str):
  with open_task_sandbox(task, backend) as ts:  # sandbox + setup + baseline manifest
    run = agent.run(ts.sandbox, task)  # or your agent
    return Verifier(VerifierConfig(mode="after")).grade(ts, agent_timed_out=run.timed_out)


def main(backend: str = "bwrap") -> list:
  tasks = load_tasks("envs/tasks/core")  # also reads Terminal-Bench / Harbor folders
  fresh = procedural.sample(3, seed=0)  # or procedural.stream(seed) forever
  results = []
  runs = [(tasks[0], OracleAgent()), (fresh[0], OracleAgent()), (fresh[0], NullAgent())]
  for task, agent in runs:
    res = grade(task, agent, backend)
    print(f"{task.id} {type(agent).__name__}: passed={res.passed} reward={res.reward:.2f} "
          f"failure_mode={res.failure_mode} subscores={dict(res.subscores)}")  # fmt: skip
    results.append((task.id, type(agent).__name__, res.passed))
  print(f"{len(tasks)} core tasks loaded; {len(fresh)} procedural tasks sampled")
  return results


if __name__ == "__main__":
  main(*sys.argv[1:])
