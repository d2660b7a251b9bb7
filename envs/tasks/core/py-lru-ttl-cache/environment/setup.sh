#!/usr/bin/env bash
set -euo pipefail
cat > cache.py <<'EOF'
import time


class LRUCache:
    def __init__(self, capacity, ttl=None, clock=time.monotonic):
        self.capacity = capacity
        self.ttl = ttl
        self.clock = clock
        self.data = {}
        self.order = []
        self.hits = self.misses = self.evictions = 0

    def get(self, key, default=None):
        if key in self.data:
            self.hits += 1
            return self.data[key][0]
        self.misses += 1
        return default

    def put(self, key, value):
        self.data[key] = (value, self.clock())
        self.order.append(key)
        if len(self.data) > self.capacity:
            old = self.order.pop()
            del self.data[old]
            self.evictions += 1

    def __len__(self):
        return len(self.data)

    def stats(self):
        return {"hits": self.hits, "misses": self.misses}
EOF
