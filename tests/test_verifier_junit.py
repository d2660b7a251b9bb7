"""Verifier pieces without a sandbox: JUnit parsing, witness lines, the tamper scan, masking."""

import base64

import pytest

from envs.grading.reports import (
  junit_name,
  parse_junit,
  split_witness,
  tamper_flags,
  witness_conflicts,
)
from envs.grading.scoring import GradeResult, masked_result

XML = b"""<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="NONCE" errors="1" failures="1" skipped="1" tests="5">
<testcase classname="test_outputs" name="test_ok" time="0.01"/>
<testcase classname="test_outputs" name="test_bad"><failure message="assert 1 == 2">trace</failure></testcase>
<testcase classname="test_outputs" name="test_skip"><skipped message="no reason"/></testcase>
<testcase classname="test_outputs.TestX" name="test_err"><error message="fixture failed"/></testcase>
<testcase classname="test_outputs" name="test_param[a-1]"/>
</testsuite></testsuites>"""


def test_parse_junit_outcomes():
  cases = parse_junit(XML, "NONCE")
  got = [(c.name, c.outcome) for c in cases]
  assert got == [
    ("test_outputs::test_ok", "passed"),
    ("test_outputs::test_bad", "failed"),
    ("test_outputs::test_skip", "skipped"),
    ("test_outputs.TestX::test_err", "error"),
    ("test_outputs::test_param[a-1]", "passed"),
  ]
  assert cases[1].message == "assert 1 == 2"


def test_parse_junit_rejects_foreign_or_broken_reports():
  with pytest.raises(ValueError, match="nonce"):
    parse_junit(XML, "OTHER")
  with pytest.raises(ValueError, match="invalid"):
    parse_junit(b"<testsuites><testsuite", None)
  with pytest.raises(ValueError, match="no <testsuite>"):
    parse_junit(b"<testsuites/>", None)
  single = b'<testsuite name="n"><testcase classname="m" name="t"/></testsuite>'
  assert [c.outcome for c in parse_junit(single, "n")] == ["passed"]


def _w(nodeid: str, phase: str, state: str) -> str:
  return f"@@W {base64.b64encode(nodeid.encode()).decode()} {phase} {state}\n"


def test_junit_name_follows_pytests_address_rule():
  assert junit_name("test_outputs.py::test_ok") == "test_outputs::test_ok"
  assert junit_name("sub/test_b.py::TestX::test_err") == "sub.test_b.TestX::test_err"
  assert junit_name("test_outputs.py::test_param[a::b.py]") == "test_outputs::test_param[a::b.py]"


def test_witness_lines_are_split_from_the_report_and_checked():
  head = (
    _w("test_outputs.py::test_ok", "func", "ok")
    + _w("test_outputs.py::test_ok", "call", "ok")
    + _w("test_outputs.py::test_bad", "call", "raised")
    + _w("test_outputs.py::TestX::test_err", "call", "ok")
    + _w("test_outputs.py::test_param[a-1]", "call", "ok")
    + _w("test_outputs.py::test_param[a-1]", "call", "ok")  # a forger's extra line: harmless
  )
  seen, rest = split_witness(head + XML.decode(), "@@W ")
  assert rest == XML.decode()
  assert seen["test_outputs::test_ok"] == ["func ok", "call ok"]
  cases = parse_junit(rest.encode(), "NONCE")
  assert witness_conflicts(cases, seen) == []  # failed, skipped and errored need no witness
  # The report passes a test the witness saw raise, or one it never saw called.
  forged = [c if c.name != "test_outputs::test_bad" else type(c)(c.name, "passed") for c in cases]
  assert witness_conflicts(forged, seen) == ["test_outputs::test_bad"]
  del seen["test_outputs::test_ok"]
  assert witness_conflicts(cases, seen) == ["test_outputs::test_ok"]
  # A "raised" line wins over any number of "ok" lines for the same test.
  seen2, _ = split_witness(
    _w("t.py::a", "call", "ok") + _w("t.py::a", "func", "raised") + "<x/>", "@@W "
  )
  assert witness_conflicts([type(cases[0])("t::a", "passed")], seen2) == ["t::a"]


def test_malformed_witness_lines_invalidate_the_report():
  for bad in ("@@W !!notbase64 call ok\n", "@@W dGVzdA== call\n"):
    with pytest.raises(ValueError, match="malformed witness"):
      split_witness(bad + XML.decode(), "@@W ")


def test_tamper_flags_only_for_changed_files():
  base = {"conftest.py": "h1", "app.py": "h2", "pkg/json.py": "h3"}
  now = {
    "conftest.py": "h1",  # shipped with the task, unchanged: fine
    "app.py": "changed",  # legit edit
    "sub/conftest.py": "new",
    "sitecustomize.py": "new",
    "x.pth": "new",  # a .pth outside a site folder is data (a PyTorch model), not a hook
    "venv/lib/python3.12/site-packages/x.pth": "new",
    "pytest/__init__.py": "new",
    "json.py": "new",  # shadows the standard library at the workspace root
    "pkg/json.py": "h3",
    "evil.py": "new",
  }
  contents = {"app.py": b"def f():\n  return 1\n", "evil.py": b"import _pytest.runner\n"}
  flags = tamper_flags(base, now, contents)
  assert flags == [
    "tamper:test_machinery_in:evil.py",
    "tamper:shadows_stdlib:json.py",
    "tamper:planted:pytest/__init__.py",
    "tamper:planted:sitecustomize.py",
    "tamper:planted:sub/conftest.py",
    "tamper:planted:venv/lib/python3.12/site-packages/x.pth",
  ]


def test_masked_results_are_never_reward_zero():
  for mode in ("task_error", "sandbox_error", "infra_error"):
    r = masked_result("t", mode, "boom")
    assert r.masked and r.reward is None and not r.passed and r.failure_mode == mode
  with pytest.raises(AssertionError):
    masked_result("t", "test_timeout", "x")
  d = GradeResult("t", True, 1.0, "none", subscores=(("tests_passed", 1.0),)).to_dict()
  assert d["subscores"] == {"tests_passed": 1.0} and d["reward"] == 1.0
