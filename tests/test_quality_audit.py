"""Quarantine file and runtime reward audits (pure: graded results are constructed by hand)."""

import json
import threading

from envs.grading.quality import AuditConfig, Quarantine, RewardAuditor
from envs.grading.scoring import GradeResult, masked_result


def res(passed: bool, flags=()) -> GradeResult:
  return GradeResult("t", passed, 1.0 if passed else 0.0, "none", flags=tuple(flags))


def test_quarantine_file_roundtrip_and_concurrent_writers(tmp_path):
  path = tmp_path / "sub" / "quarantine.json"
  q = Quarantine(path)
  assert q.ids() == frozenset() and "a" not in q
  q.add("a", "no-op passes", source="gate")
  other = Quarantine(path)  # another process's view of the same file
  assert "a" in other and other.reason("a") == "no-op passes"
  threads = [
    threading.Thread(target=lambda i=i: Quarantine(path).add(f"t{i}", f"r{i}")) for i in range(16)
  ]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  data = json.loads(path.read_text())
  assert data["version"] == 1 and set(data["tasks"]) == {"a"} | {f"t{i}" for i in range(16)}
  assert data["tasks"]["t3"]["reason"] == "r3" and data["tasks"]["a"]["source"] == "gate"
  q.remove("a")
  assert "a" not in other and len(other.ids()) == 16


def test_touched_protected_paths_flag_and_quarantine(tmp_path):
  q = Quarantine(tmp_path / "q.json")
  aud = RewardAuditor(AuditConfig(evidence_dir=str(tmp_path / "ev"), regrade_prob=0.0), q)
  honest = ["cat data.csv", "python3 fix.py", "pytest tests/ -q"]
  assert aud.observe("t", res(True), honest) == []
  # A failed trajectory that pokes around is not flagged (nothing was gained).
  assert aud.observe("t", res(False), ["cat /tests/test_outputs.py"]) == []
  assert aud.observe("t", res(True), ["ls /logs/verifier", "echo 1 > reward.txt"]) == [
    "touched_protected_paths"
  ]
  assert "t" not in q  # threshold 2 for this flag
  flags = aud.observe("t", res(True), ["cat /tmp/.agentrl-grader-x/tests/test_a.py"])
  assert flags == ["touched_protected_paths"] and "t" in q
  assert q.reason("t") == "runtime audit: touched_protected_paths"
  ev = json.loads(open(q.entries()["t"]["evidence"]).read())
  assert ev["flags"] == ["touched_protected_paths"] and ev["commands"][0].startswith(
    "cat /tmp/.agentrl-grader"
  )
  assert ev["stats"]["n"] == 4 and ev["result"]["passed"] is True
  assert aud.summary("t")["flags"] == {"touched_protected_paths": 2}


def test_tamper_flag_quarantines_at_once(tmp_path):
  q = Quarantine(tmp_path / "q.json")
  aud = RewardAuditor(AuditConfig(regrade_prob=0.0), q)
  assert aud.observe("t", res(False, ["tamper:planted:conftest.py"])) == ["tamper"]
  assert "t" in q and aud.events[-1]["quarantined"]


def test_abrupt_jump_to_always_passing(tmp_path):
  q = Quarantine(tmp_path / "q.json")
  aud = RewardAuditor(AuditConfig(window=8, jump_low=0.25, regrade_prob=0.0), q)
  history = [False] * 7 + [True] + [True] * 8  # 1/8 then 8/8
  flagged_at = [i for i, p in enumerate(history) if aud.observe("t", res(p)) == ["abrupt_jump"]]
  assert flagged_at == [15] and "t" in q
  # A task learned gradually is not flagged.
  aud2 = RewardAuditor(
    AuditConfig(window=8, jump_low=0.25, regrade_prob=0.0), Quarantine(tmp_path / "q2.json")
  )
  gradual = [i % 4 == 0 for i in range(8)] + [i % 3 != 0 for i in range(8)] + [True] * 8
  assert all(aud2.observe("g", res(p)) == [] for p in gradual)


def test_regrade_disagreement(tmp_path):
  q = Quarantine(tmp_path / "q.json")
  aud = RewardAuditor(AuditConfig(regrade_prob=1.0), q)
  calls = []

  def regrade_same():
    calls.append(1)
    return res(True)

  assert aud.observe("a", res(True), regrade=regrade_same) == [] and calls == [1]
  assert aud.observe("b", res(True), regrade=lambda: res(False)) == ["regrade_disagreement"]
  assert "b" in q and "a" not in q
  # Infrastructure trouble on the re-grade is not a disagreement.
  assert (
    aud.observe("c", res(True), regrade=lambda: masked_result("c", "sandbox_error", "died")) == []
  )
  # Failed trajectories are not re-graded (regrade is for suspicious passes).
  assert aud.observe("d", res(False), regrade=lambda: res(True)) == []


def test_stats_masked_and_state(tmp_path):
  aud = RewardAuditor(AuditConfig(regrade_prob=0.5, seed=3))
  for p in (True, False, True):
    aud.observe("t", res(p))
  aud.observe("t", masked_result("t", "infra_error", "daemon down"))
  s = aud.summary("t")
  assert (s["n"], s["masked"]) == (3, 1) and abs(s["pass_rate"] - 2 / 3) < 1e-12
  state = json.loads(json.dumps(aud.state_dict()))
  b = RewardAuditor(AuditConfig(regrade_prob=0.5, seed=99))
  b.load_state_dict(state)
  assert b.summary("t") == s
  draws_a = [aud._rng.random() for _ in range(5)]
  draws_b = [b._rng.random() for _ in range(5)]
  assert draws_a == draws_b
