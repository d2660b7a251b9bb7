"""Terminal-Bench fidelity (issue 37): the agent's listening services stay up while the tests
run (envs.sandbox.services), its other processes do not; on both backends."""

import dataclasses

from task_files import write

from envs import eval as ev
from envs.formats.loading import load_any
from envs.grading.verifier import VerifierConfig
from envs.sandbox import services
from envs.sandbox.testing import backend, sandbox_image  # noqa: F401 (fixtures)

# The reference solution starts a web server on 127.0.0.1 and a loop that only writes a file,
# both in the background, and exits. TB's harness runs the tests right after, in the same
# container, with both still running.
SERVER_TASK = {
  "task.yaml": "instruction: Serve /app/site on 127.0.0.1:8765.\ndifficulty: easy\n",
  "Dockerfile": "FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620\nWORKDIR /app\n",
  "solution.sh": """
    #!/bin/bash
    mkdir -p /app/site && echo hello > /app/site/index.html
    nohup python3 -m http.server 8765 --bind 127.0.0.1 --directory /app/site > /tmp/srv.log 2>&1 &
    ( while true; do date +%s%N >> /app/ticks; sleep 0.1; done ) > /dev/null 2>&1 &
    for i in $(seq 100); do
      python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:8765/')" 2>/dev/null && break
      sleep 0.1
    done
  """,
  "tests/test_outputs.py": """
    import time
    import urllib.request
    from pathlib import Path

    def test_the_loop_is_dead():
      before = Path("/app/ticks").read_text()
      time.sleep(1.0)
      assert Path("/app/ticks").read_text() == before

    def test_the_server_answers():  # by name, as TB's tests do (`curl localhost:3000`)
      with urllib.request.urlopen("http://localhost:8765/index.html", timeout=10) as r:
        assert r.read() == b"hello\\n"
  """,
}


def _grade(task, backend, **verifier):  # noqa: F811
  cfg = ev.EvalConfig(backend=backend, verifier=VerifierConfig(**verifier))
  return ev.evaluate([task], ev.make_agent("oracle"), cfg)[0]


def _tests(rec) -> dict[str, bool]:
  return {t["name"].rsplit("::", 1)[-1]: t["outcome"] == "passed" for t in rec["tests"]}


def test_a_service_survives_and_a_loop_does_not(tmp_path, backend):  # noqa: F811
  task = load_any(write(tmp_path / "serve", SERVER_TASK))
  assert task.tests.keep_services  # the Terminal-Bench loader's default
  kept = _grade(task, backend)
  assert kept["passed"], kept["detail"]
  assert "kept_services:python3" in kept["flags"], kept["flags"]
  assert _tests(kept) == {"test_the_loop_is_dead": True, "test_the_server_answers": True}
  # Without keep_services (--nokeep_services) the server is killed with the loop: HTTP fails.
  killed = _grade(task, backend, keep_services=False)
  assert not killed["passed"] and killed["failure_mode"] == "tests_failed", killed["detail"]
  assert _tests(killed) == {"test_the_loop_is_dead": True, "test_the_server_answers": False}
  assert not any(f.startswith("kept_services") for f in killed["flags"]), killed["flags"]


def test_tasks_of_other_formats_kill_every_process(tmp_path):
  # A native task (RL's tasks and procedural families) keeps today's rule, and "fresh"
  # grading cannot carry a process into the fresh box.
  native = dataclasses.replace(
    load_any(write(tmp_path / "serve", SERVER_TASK)),
    tests=dataclasses.replace(load_any(tmp_path / "serve").tests, keep_services=False),
  )
  rec = _grade(native, "bwrap")
  assert not rec["passed"] and _tests(rec)["test_the_server_answers"] is False, rec["detail"]
  fresh = _grade(load_any(tmp_path / "serve"), "bwrap", mode="fresh")
  assert not fresh["passed"] and _tests(fresh)["test_the_server_answers"] is False


def test_a_kept_service_that_rewrites_the_tests_is_caught(tmp_path):
  # A kept service runs as the same user beside the tests: it can find the grader's folder
  # once it exists. One that rewrites the tests (and does not put them back) is tamper.
  files = dict(SERVER_TASK)
  files["solution.sh"] = """
    #!/bin/bash
    cat > /tmp/evil.py <<'EOF'
    import glob, socket, time
    s = socket.socket(); s.bind(("127.0.0.1", 8766)); s.listen()
    while True:
      for f in glob.glob("/tmp/.agentrl-grader-*/tests/test_outputs.py"):
        try:
          open(f, "w").write("def test_ok():\\n  pass\\n")
        except OSError:
          pass
      time.sleep(0.01)
    EOF
    nohup python3 /tmp/evil.py > /dev/null 2>&1 &
    sleep 1
  """
  rec = _grade(load_any(write(tmp_path / "evil", files)), "bwrap")
  assert not rec["passed"] and rec["failure_mode"] == "tamper", rec
  assert "tamper:tests_modified" in rec["flags"] and "kept_services:python3" in rec["flags"]


TABLES = {
  "tcp": """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:223D 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 101 1 0000000000000000 100 0 0 10 0
   1: 0100007F:223D 0100007F:A2F4 01 00000000:00000000 00:00000000 00000000  1000        0 102 1 0000000000000000 20 4 30 10 -1
   2: 0100007F:A2F4 0100007F:223D 06 00000000:00000000 03:00000FA2 00000000     0        0 0 3 0000000000000000
""",
  "tcp6": """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000000000000:0016 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 103 1 0000000000000000 100 0 0 10 0
""",
  "udp": """\
   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  1: 00000000:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 104 2 0000000000000000 0
  2: 0100007F:D431 0100007F:0035 01 00000000:00000000 00:00000000 00000000     0        0 105 2 0000000000000000 0
""",
  "udp6": "  sl  local_address remote_address st tx_queue rx_queue tr tm->when retrnsmt uid timeout inode\n",
  "unix": """\
Num       RefCount Protocol Flags    Type St Inode Path
0000000000000000: 00000002 00000000 00010000 0001 01 106 /run/sshd.sock
0000000000000000: 00000002 00000000 00010000 0005 01 107 @seqpacket
0000000000000000: 00000003 00000000 00000000 0001 03 108 /run/sshd.sock
0000000000000000: 00000002 00000000 00000000 0002 01 109 /dev/log
0000000000000000: 00000002 00000000 00010000 0001 01 0
""",
}


def test_listening_inodes_from_proc_net_lines():
  # TCP/TCP6 in LISTEN (0A), UDP unconnected (07), UNIX stream/seqpacket with __SO_ACCEPTCON;
  # not: an established or TIME_WAIT TCP socket, a connected UDP socket, a connected UNIX
  # stream, a UNIX datagram socket, inode 0.
  assert services.listening_inodes(TABLES) == {101, 103, 104, 106, 107}
  assert services.listening_inodes({"tcp": "header\n  0: garbage\n"}) == set()


def test_survivors_are_listeners_and_their_descendants():
  P = services.Proc
  procs = {
    10: P(1, "bash", frozenset()),  # the agent's shell: the server's parent, not kept
    11: P(10, "nginx", frozenset({101, 500})),
    12: P(11, "nginx", frozenset({101})),
    13: P(11, "helper", frozenset()),  # a worker without the socket: a descendant, kept
    14: P(13, "sleep", frozenset()),
    20: P(1, "bash", frozenset({102})),  # an established connection only: not kept
    21: P(20, "sleep", frozenset()),
  }
  assert services.survivors(procs, {101, 103}) == {11, 12, 13, 14}
  kept = [services.Service(p, p, procs[p].comm) for p in (11, 12, 13, 14)]
  assert services.names(kept) == "helper,nginx,sleep"
  assert services.names(kept, limit=1) == "helper(+2)"
