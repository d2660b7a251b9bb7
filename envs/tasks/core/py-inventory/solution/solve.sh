#!/usr/bin/env bash
set -euo pipefail
cat > inventory.py <<'EOF'
class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, name, qty):
        if not isinstance(qty, int) or isinstance(qty, bool) or qty <= 0:
            raise ValueError(f"quantity must be a positive integer, got {qty!r}")
        self.items[name] = self.items.get(name, 0) + qty

    def remove(self, name, qty):
        have = self.items.get(name, 0)
        if name not in self.items or qty > have:
            raise ValueError(f"cannot remove {qty} of {name!r}: {have} in stock")
        if qty == have:
            del self.items[name]
        else:
            self.items[name] = have - qty

    def count(self, name):
        return self.items.get(name, 0)

    def total(self):
        return sum(self.items.values())
EOF
