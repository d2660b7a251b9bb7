import hashlib
import os
import pathlib
import subprocess
import tarfile

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))
SHA = {
    "queue": "54b82c724a3989e9cae3c7077e71aba87309ca5d2389758f45aeef8b64b2b081",
    ".queue/tickets.b64": "94bf2f202f58769b5821066c0ebf6b9da2fe8ca5f458b1ec83dbf3605c15b165",
}
MERGED = ["first line", "shared    line", "alpha end", "BETA one", "beta    two    tabs", "gamma"]


def test_queue_untouched_and_finished():
    for rel, sha in SHA.items():
        assert hashlib.sha256((WS / rel).read_bytes()).hexdigest() == sha
    assert (WS / ".queue/state").read_text().strip() == "10"
    r = subprocess.run(["python3", str(WS / "queue"), "show"], cwd=WS, capture_output=True, text=True, timeout=30)
    assert r.stdout.strip() == "all 10 tickets done"


def test_layout():
    assert sorted(os.listdir(WS)) == sorted([".queue", "drop", "inbox.tar.gz", "merged.txt", "numbered.txt", "queue", "stats.txt"])
    assert sorted(os.listdir(WS / "drop")) == ["README", "notes.md"]
    assert (WS / "drop/README").read_text() == "Drop folder: incoming files land here.\n"
    assert (WS / "drop/notes.md").read_text() == "# notes\nnot a txt file\n"


def test_text_outputs():
    assert (WS / "merged.txt").read_text() == "".join(f"{line}\n" for line in MERGED)
    assert (WS / "numbered.txt").read_text() == "".join(f"{i:03d}: {line}\n" for i, line in enumerate(MERGED, 1))
    text = (WS / "merged.txt").read_text()
    assert (WS / "stats.txt").read_text() == f"lines: {len(MERGED)}\nwords: {len(text.split())}\nchars: {len(text.encode())}\n"


def test_archive():
    with tarfile.open(WS / "inbox.tar.gz", "r:gz") as tar:
        files = {m.name.removeprefix("./"): tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    assert files == {
        "inbox/alpha.txt": b"first line\nshared\tline\nalpha end\n",
        "inbox/beta.txt": b"BETA one\nshared\tline\nbeta\ttwo\ttabs\n",
        "inbox/gamma.txt": b"gamma\nfirst line\ngamma\n",
        "inbox/index.txt": b"alpha.txt\nbeta.txt\ngamma.txt\n",
    }
