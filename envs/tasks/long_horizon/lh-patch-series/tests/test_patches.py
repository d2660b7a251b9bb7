import hashlib
import os
import pathlib
import subprocess
import sys

WS = pathlib.Path(os.environ.get("AGENTRL_WORKSPACE", "/workspace"))
PATCH_SHA = {
    '0001-add-banana.patch': '38efdccc61c8829f2358dace0231f195a21feb26a6fffe6448f684c7a425fdab',
    '0002-quantities.patch': 'a3ebb70115b8aff0ced166f9c98994043f5d05eb729f85cf910e6015b14ed3e1',
    '0003-vat-docstring.patch': '60d916923b7ffe945dade21397c3d599a395879b0cd99932bdc82b6c1b0eb549',
    '0004-vat-rate.patch': 'f3b1c312a19b82ce9a10a4953e4067ceca9badea4525de70d38d2fbf4b4a3ffb',
    '0005-discount.patch': '3a37031a5cb962a31bf424d187c71378deed57600e03a5e9e4799ed684922004',
    '0006-readme.patch': 'd7b08361da468a5daf4fbf365bdfa5d796952c23a4dd9d7dd16f0df375262117',
    '0007-unknown-item.patch': '62cd43e7b17d1e02d8a59dc117a6aa42b14eede9c083665426643bb1009bcd9f',
    '0008-vat-rounding.patch': '3f5ae0a37a857a4224a041025c2028e612449270797d04d66e38d14d535d692a',
    '0009-cli.patch': '03b45446450da48bc98a9c21bab2e9d0b67e2bc25be70b8b12fb341dae76ba9c',
    '0010-selftest.patch': '372285cd8c2cc1a65b3ae63ea22298d6e8f0230bfe780d6794148af585705542',
}
FINAL = {
    'src/README.md': '# shop\n\n`total`, `with_vat` and `discount` for a tiny shop.\n',
    'src/selftest.py': 'import shop\n\nassert shop.total({"apple": 2, "banana": 4}) == 2.0\nassert shop.with_vat(10) == 12.0\nassert shop.with_vat(0.1) == 0.12\nassert shop.discount(200, 25) == 150\ntry:\n    shop.total({"kiwi": 1})\nexcept ValueError as e:\n    assert "kiwi" in str(e)\nelse:\n    raise AssertionError("kiwi should be unknown")\nprint("selftest OK")\n',
    'src/shop.py': '"""A tiny shop."""\n\nVAT_RATE = 0.2\nPRICES = {"apple": 0.5, "pear": 0.75, "banana": 0.25}\n\n\ndef total(items):\n    """Sum of price x quantity over `items`, a dict {name: quantity}."""\n    s = 0\n    for name, qty in items.items():\n        if name not in PRICES:\n            raise ValueError(f"unknown item {name}")\n        s += PRICES[name] * qty\n    return s\n\n\ndef with_vat(amount):\n    """The amount including VAT."""\n    return round(amount * (1 + VAT_RATE), 2)\n\n\ndef discount(amount, pct):\n    """`amount` reduced by `pct` percent."""\n    return amount * (100 - pct) / 100\n\n\nif __name__ == "__main__":\n    import sys\n\n    basket = {name: int(q) for name, q in (arg.split("=") for arg in sys.argv[1:])}\n    print(with_vat(total(basket)))\n',
}
APPLIED = [
    "0001-add-banana.patch applied",
    "0002-quantities.patch applied",
    "0003-vat-docstring.patch applied",
    "0004-vat-rate.patch manual",
    "0005-discount.patch applied",
    "0006-readme.patch applied",
    "0007-unknown-item.patch applied",
    "0008-vat-rounding.patch manual",
    "0009-cli.patch applied",
    "0010-selftest.patch applied",
]


def test_patches_untouched_and_layout():
    assert sorted(os.listdir(WS / "patches")) == sorted(PATCH_SHA)
    for name, sha in PATCH_SHA.items():
        assert hashlib.sha256((WS / "patches" / name).read_bytes()).hexdigest() == sha
    assert sorted(os.listdir(WS)) == ["applied.txt", "patches", "selftest.log", "src"]


def test_final_sources():
    files = sorted(str(p.relative_to(WS)) for p in (WS / "src").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    assert files == sorted(FINAL)
    for path, text in FINAL.items():
        assert (WS / path).read_text() == text, path


def test_behaviour():
    r = subprocess.run([sys.executable, "-B", "src/selftest.py"], cwd=WS, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and r.stdout == "selftest OK\n", r.stderr
    r = subprocess.run([sys.executable, "-B", "src/shop.py", "apple=2", "pear=4"], cwd=WS, capture_output=True, text=True, timeout=30)
    assert r.stdout == "4.8\n"
    assert (WS / "selftest.log").read_text() == "selftest OK\n"


def test_applied_log():
    assert (WS / "applied.txt").read_text().splitlines() == APPLIED
