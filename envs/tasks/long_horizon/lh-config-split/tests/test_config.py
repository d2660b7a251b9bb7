import hashlib
import os
import pathlib
import shutil
import stat
import subprocess
import tarfile
import tempfile

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))
ORIG_SHA = "cc33a9121f00c57c13acb79d218fefc6138b5281efdf763f6cd23097164497d9"
FILES = {
    "10-general.ini": "[General]\nname = demo-app\ndebug = false\n",
    "20-database.ini": "[Database]\nhost = db.internal\nport = 5432\nuser = app\npassword = ${DATABASE_PASSWORD}\n",
    "30-cache.ini": "[Cache]\nhost = cache.internal\nttl = 300\n",
    "40-api.ini": "[API]\nbase_url = https://api.example.com/v1?x=1\ntoken = ${API_TOKEN}\ntimeout = 30\n",
    "50-logging.ini": "[Logging]\nlevel = INFO\nfile = /var/log/app.log\n",
}
NEW = "\n".join(FILES[k] for k in sorted(FILES))


def run(args, cwd=WS):
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=30)


def test_untouched_and_layout():
    assert hashlib.sha256((WS / "config/app.ini").read_bytes()).hexdigest() == ORIG_SHA
    assert os.listdir(WS / "config") == ["app.ini"]
    assert sorted(os.listdir(WS)) == sorted(["app.ini.new", "backup", "check.sh", "conf.d", "config", "diff.patch", "render.sh", "secrets.env"])


def test_conf_d():
    assert sorted(os.listdir(WS / "conf.d")) == sorted([*FILES, "index.txt", "SHA256SUMS"])
    for name, text in FILES.items():
        assert (WS / "conf.d" / name).read_text() == text, name
    assert (WS / "conf.d/index.txt").read_text() == "".join(f"{k}\n" for k in sorted(FILES))


def test_secrets():
    assert (WS / "secrets.env").read_text() == "API_TOKEN=tok_12345\nDATABASE_PASSWORD=s3cr3t!\n"
    assert stat.S_IMODE((WS / "secrets.env").stat().st_mode) == 0o600


def test_app_ini_new_and_patch():
    assert (WS / "app.ini.new").read_text() == NEW
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp, "out.ini")
        r = run(["patch", "-s", "-o", str(out), str(WS / "config/app.ini"), str(WS / "diff.patch")])
        assert r.returncode == 0, r.stderr
        assert out.read_text() == NEW
    assert (WS / "diff.patch").read_text().startswith("--- config/app.ini")


def test_backup():
    with tarfile.open(WS / "backup/config-orig.tar.gz", "r:gz") as tar:
        files = [m for m in tar.getmembers() if m.isfile()]
        assert [m.name for m in files] == ["config/app.ini"]
        assert tar.extractfile(files[0]).read() == (WS / "config/app.ini").read_bytes()
    assert os.listdir(WS / "backup") == ["config-orig.tar.gz"]


def test_sha256sums():
    lines = (WS / "conf.d/SHA256SUMS").read_text().splitlines()
    assert [line.split()[-1].lstrip("*") for line in lines] == sorted(FILES)
    assert run(["sha256sum", "-c", "SHA256SUMS"], WS / "conf.d").returncode == 0


def test_check_sh():
    assert run(["bash", "check.sh"]).returncode == 0
    for bad in ("[Cache]\nhost = a\nhost = b\n", "[Cache]\nhost=a\n", "host = a\n", "[Cache]\n; comment\n"):
        with tempfile.TemporaryDirectory() as tmp:
            ws = pathlib.Path(tmp, "ws")
            shutil.copytree(WS, ws)
            (ws / "conf.d/30-cache.ini").write_text(bad)
            assert run(["bash", "check.sh"], ws).returncode == 1, bad


def test_render():
    r = run(["bash", "render.sh"])
    assert r.returncode == 0
    assert r.stdout == NEW.replace("${DATABASE_PASSWORD}", "s3cr3t!").replace("${API_TOKEN}", "tok_12345")
