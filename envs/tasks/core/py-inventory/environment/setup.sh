#!/usr/bin/env bash
set -euo pipefail
cat > inventory.py <<'EOF'
class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, name, qty):
        self.items[name] = self.items.get(name, 0) + qty

    def remove(self, name, qty):
        self.items[name] -= qty

    def count(self, name):
        return self.items[name]

    def total(self):
        return len(self.items)
EOF
cat > test_inventory.py <<'EOF'
from inventory import Inventory


def test_add_count():
    inv = Inventory()
    inv.add("apple", 3)
    inv.add("apple", 2)
    assert inv.count("apple") == 5
EOF
