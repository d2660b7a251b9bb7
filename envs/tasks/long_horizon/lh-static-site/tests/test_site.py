import hashlib
import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))
SOURCES = {
    "assets/style.css": "e575a777b51f014558a7435e20dca6932bc0195e4cc63a260173b77fc464010c",
    "src/pages/about.md": "7e14a5d5bacb4679073fdd380395451e76793855e52b96d9ce351692562d158a",
    "src/pages/blog.md": "e2ff9513ad36df69b4cd2a60c15596f0896ab73120cd2a3dbb859afe05dbfa8f",
    "src/pages/contact.md": "04f601fdb28b2b1df46aeb8e67d9de01c6a2c6e452b240555f9b5b6c34661cd7",
    "src/pages/faq.md": "245d046ede7838fb8e639ef500d7e67f5edef71e857b3a83fbf9d769a83fb49e",
    "templates/page.html": "0aee28ba05be320c3d23362390a762a887504600e937d2583d2c363b6792b6ce",
    "tools/render.py": "3679157dfa41da9c41235138ca5518801789ad0c90727ae6452067d581a54c0b",
}
PAGES = ["about", "blog", "contact", "faq"]
INDEX = """<html><head><title>Index</title></head><body>
<ul>
<li><a href="about.html">About us</a></li>
<li><a href="blog.html">Blog</a></li>
<li><a href="contact.html">Contact</a></li>
<li><a href="faq.html">Frequently asked questions</a></li>
</ul>
</body></html>
"""


def make(cwd, *args):
    return subprocess.run(["make", *args], cwd=cwd, capture_output=True, text=True, timeout=60)


def files(root):
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def test_sources_untouched_and_layout():
    for rel, sha in SOURCES.items():
        assert hashlib.sha256((WS / rel).read_bytes()).hexdigest() == sha, rel
    assert sorted(p.name for p in WS.iterdir()) == ["Makefile", "assets", "build", "dist", "src", "templates", "tools"]
    assert sorted(p.name for p in (WS / "tools").iterdir()) == ["checklinks.sh", "index.sh", "render.py"]
    assert files(WS / "src") == [f"pages/{p}.md" for p in PAGES]


def test_build_tree():
    build = WS / "build"
    assert files(build) == ["about.html", "assets/style.css", "blog.html", "contact.html", "faq.html", "index.html", "sitemap.txt"]
    with tempfile.TemporaryDirectory() as tmp:
        for p in PAGES:
            out = pathlib.Path(tmp, p + ".html")
            subprocess.run([sys.executable, str(WS / "tools/render.py"), str(WS / f"src/pages/{p}.md"), str(WS / "templates/page.html"), str(out)], check=True)
            assert (build / f"{p}.html").read_text() == out.read_text()
    assert (build / "assets/style.css").read_bytes() == (WS / "assets/style.css").read_bytes()
    assert (build / "index.html").read_text() == INDEX
    assert (build / "sitemap.txt").read_text() == "about.html\nblog.html\ncontact.html\nfaq.html\nindex.html\n"


def test_dist():
    with tarfile.open(WS / "dist/site.tar.gz", "r:gz") as tar:
        members = {m.name.removeprefix("./"): m for m in tar.getmembers() if m.isfile()}
        assert sorted(members) == files(WS / "build")
        for name, m in members.items():
            assert tar.extractfile(m).read() == (WS / "build" / name).read_bytes()
    assert sorted(os.listdir(WS / "dist")) == ["SHA256SUMS", "site.tar.gz"]
    r = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=WS / "dist", capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_phony():
    phony = " ".join(line.split(":", 1)[1] for line in (WS / "Makefile").read_text().splitlines() if line.startswith(".PHONY:"))
    assert {"clean", "dist", "check"} <= set(phony.split())


def test_make_behaviour_in_a_copy():
    with tempfile.TemporaryDirectory() as tmp:
        ws = pathlib.Path(tmp, "ws")
        shutil.copytree(WS, ws, symlinks=True)
        assert make(ws, "-q", "build").returncode == 0  # the workspace build is up to date
        assert make(ws, "clean").returncode == 0
        assert not (ws / "build").exists() and not (ws / "dist").exists()
        r = make(ws)  # the default target is build
        assert r.returncode == 0, r.stderr
        assert files(ws / "build") == files(WS / "build")
        for f in files(WS / "build"):
            assert (ws / "build" / f).read_bytes() == (WS / "build" / f).read_bytes(), f
        assert make(ws, "-q", "build").returncode == 0
        time.sleep(1.1)
        (ws / "src/pages/faq.md").touch()
        dry = make(ws, "-n", "build").stdout
        assert "faq" in dry and "about.md" not in dry and "blog.md" not in dry
        assert make(ws, "build").returncode == 0 and make(ws, "-q", "build").returncode == 0
        assert make(ws, "dist").returncode == 0 and (ws / "dist/SHA256SUMS").is_file()
        assert make(ws, "check").returncode == 0
        page = ws / "build/about.html"
        page.write_text(page.read_text().replace("</body>", '<a href="nope.html">x</a></body>'))
        assert make(ws, "check").returncode != 0
