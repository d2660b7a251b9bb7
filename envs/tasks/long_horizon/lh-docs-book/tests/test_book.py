import hashlib
import json
import os
import pathlib

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))
BOOK = WS / "book"
DOCS_SHA = {
    "ORDER": "94cdb310fe301d2ed438264e2977697ae82f0cacee95fcbf0308553f9f61227a",
    "faq.md": "1af2dbed665e3f614a391a6cceb92b33ed6e2c3d9c5394d62edcfaa5a7a8350e",
    "install.md": "8fdff46aef9167de4780b1fb5ecc179a72e69ebbd138d9e131f88171fe7ca091",
    "intro.md": "a5269b05b2af503d8fc9886d6439f7ca7d9edb8ba2c506378afb4e0f31ad1abc",
    "usage.md": "407e0a26254f7291d0d5536fc86048b75f08191e90d35c6fb1c3e14e918e3c1d"
}
EXPECTED = {
    'book.md': '# Chapter 1: Introduction\n\nWidget is a **command line** tool for **batch** jobs.\n\n## 1.1 Why Widget\n\nIt is small. TODO: add a comparison table.\n\n## 1.2 Conventions\n\nCommands are shown in code blocks. See [Usage](#chapter-3-usage) for examples.\n\n# Chapter 2: Install\n\n## 2.1 From source\n\nRun `make install` as **root**.\n\n## 2.2 Checking the install\n\nRun `widget --version`. If it fails, read the [FAQ](#chapter-4-faq).\nTODO: document Windows.\n\n# Chapter 3: Usage\n\n## 3.1 Running a job\n\nGive the job file: `widget run job.yaml`. A **job** has steps.\n\n## 3.2 Dry runs\n\nAdd `--dry-run` to print the plan. Go back to the [introduction](#chapter-1-introduction).\n\n# Chapter 4: FAQ\n\n## 4.1 Is it free?\n\nYes, it is **free software**.\n\n## 4.2 Where are the logs?\n\nIn `~/.widget/logs`. See also [Install](#chapter-2-install) and [Usage](#chapter-3-usage).\n',
    'chapters.txt': 'intro.md\ninstall.md\nusage.md\nfaq.md\n',
    'glossary.txt': 'batch\ncommand line\nfree software\njob\nroot\n',
    'missing.txt': 'advanced.md\n',
    'toc.md': '- [Chapter 1: Introduction](#chapter-1-introduction)\n  - [1.1 Why Widget](#11-why-widget)\n  - [1.2 Conventions](#12-conventions)\n- [Chapter 2: Install](#chapter-2-install)\n  - [2.1 From source](#21-from-source)\n  - [2.2 Checking the install](#22-checking-the-install)\n- [Chapter 3: Usage](#chapter-3-usage)\n  - [3.1 Running a job](#31-running-a-job)\n  - [3.2 Dry runs](#32-dry-runs)\n- [Chapter 4: FAQ](#chapter-4-faq)\n  - [4.1 Is it free?](#41-is-it-free)\n  - [4.2 Where are the logs?](#42-where-are-the-logs)\n',
    'todo.txt': 'intro.md:7:It is small. TODO: add a comparison table.\ninstall.md:10:TODO: document Windows.\n',
    'words.txt': 'Chapter 1: 34\nChapter 2: 26\nChapter 3: 31\nChapter 4: 23\n',
}


def test_docs_untouched_and_layout():
    assert sorted(os.listdir(WS / "docs")) == sorted(DOCS_SHA)
    for name, sha in DOCS_SHA.items():
        assert hashlib.sha256((WS / "docs" / name).read_bytes()).hexdigest() == sha
    assert sorted(os.listdir(WS)) == ["book", "docs"]
    assert sorted(os.listdir(BOOK)) == sorted([*EXPECTED, "stats.json"])


def test_lists():
    for name in ("chapters.txt", "missing.txt", "words.txt", "glossary.txt", "todo.txt"):
        assert (BOOK / name).read_text() == EXPECTED[name], name


def test_book():
    assert (BOOK / "book.md").read_text().rstrip("\n") == EXPECTED["book.md"].rstrip("\n")


def test_toc():
    assert (BOOK / "toc.md").read_text() == EXPECTED["toc.md"]


def test_stats():
    assert json.loads((BOOK / "stats.json").read_text()) == {"chapters": 4, "sections": 8, "words": 114}
