import collections
import hashlib
import json
import os
import pathlib
import re

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))
AUDIT = WS / "audit"
LOG_SHA = {
    "app.log": "a4a6dfb129a1629f9dcf501c280b6b3a78a24638d75a4812fecec2bfe5f63bd8",
    "web-1.log": "28b9f081f227c4b24e5128e80c28b0177c7752b4e088a83ac296741ac9e85896",
    "web-2.log": "062a8170ea0f3668be56fe54c2d75762f9ae3c2a50110c18a389079d55bca8b9",
}
LINE = re.compile(r'^(\S+) - - \[15/Mar/2024:(\d\d):(\d\d):(\d\d) \+0000\] "(\S+) (\S+) HTTP/1\.1" (\d{3}) (\S+)$')


def access():
    out = []
    for name in ("web-1.log", "web-2.log"):
        for line in (WS / "logs" / name).read_text().splitlines():
            m = LINE.match(line)
            assert m, line
            out.append((line, m.groups()))
    return out


def lines(name):
    return (AUDIT / name).read_text().splitlines()


def test_logs_untouched_and_nothing_else_written():
    assert sorted(p.name for p in (WS / "logs").iterdir()) == sorted(LOG_SHA)
    for name, sha in LOG_SHA.items():
        assert hashlib.sha256((WS / "logs" / name).read_bytes()).hexdigest() == sha
    assert sorted(p.name for p in WS.iterdir()) == ["audit", "logs"]


def test_requests():
    n1 = len((WS / "logs" / "web-1.log").read_text().splitlines())
    n2 = len((WS / "logs" / "web-2.log").read_text().splitlines())
    assert lines("requests.txt") == [f"web-1.log {n1}", f"web-2.log {n2}", f"total {n1 + n2}"]


def test_status_counts():
    c = collections.Counter(int(g[6]) for _, g in access())
    assert lines("status_counts.txt") == [f"{k} {v}" for k, v in sorted(c.items())]


def test_top_ips():
    c = collections.Counter(g[0] for _, g in access())
    top = sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    assert lines("top_ips.txt") == [f"{v} {k}" for k, v in top]


def test_errors_5xx():
    rows = [(g[1:4], line) for line, g in access() if g[6].startswith("5")]
    want = [line for _, line in sorted(rows, key=lambda r: r[0])]
    assert lines("errors_5xx.log") == want


def test_paths_404():
    want = sorted({g[5].split("?")[0] for _, g in access() if g[6] == "404"})
    assert lines("paths_404.txt") == want


def test_bytes_per_ip():
    s = collections.Counter()
    for _, g in access():
        s[g[0]] += 0 if g[7] == "-" else int(g[7])
    assert lines("bytes_per_ip.csv") == ["ip,bytes"] + [f"{k},{v}" for k, v in sorted(s.items())]


def test_hourly():
    c = collections.Counter(g[1] for _, g in access())
    assert lines("hourly.txt") == [f"{k} {v}" for k, v in sorted(c.items())]


def test_app_errors_and_codes():
    errs = [line.split(" ", 2)[2] for line in (WS / "logs" / "app.log").read_text().splitlines() if line.split(" ")[1] == "ERROR"]
    assert lines("app_errors.txt") == errs
    c = collections.Counter(re.search(r"code=(E\d+)", e).group(1) for e in errs)
    assert lines("error_codes.txt") == [f"{k} {v}" for k, v in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))]


def test_summary():
    acc = access()
    s = json.loads((AUDIT / "summary.json").read_text())
    c = collections.Counter(g[0] for _, g in acc)
    errors = sum(g[6].startswith("5") for _, g in acc)
    assert s["requests"] == len(acc)
    assert abs(s["error_rate"] - round(errors / len(acc), 4)) < 1e-9
    assert s["unique_ips"] == len(c)
    assert s["top_ip"] == sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
