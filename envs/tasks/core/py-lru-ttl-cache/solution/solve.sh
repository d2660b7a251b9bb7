#!/usr/bin/env bash
set -euo pipefail
cat > cache.py <<'EOF'
import collections
import time


class LRUCache:
    def __init__(self, capacity, ttl=None, clock=time.monotonic):
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity <= 0:
            raise ValueError("capacity must be a positive int")
        self.capacity, self.ttl, self.clock = capacity, ttl, clock
        self.data = collections.OrderedDict()
        self.hits = self.misses = self.evictions = 0

    def _expired(self, key):
        return self.ttl is not None and self.clock() - self.data[key][1] >= self.ttl

    def get(self, key, default=None):
        if key in self.data and self._expired(key):
            del self.data[key]
        if key not in self.data:
            self.misses += 1
            return default
        self.data.move_to_end(key)
        self.hits += 1
        return self.data[key][0]

    def put(self, key, value):
        self.data[key] = (value, self.clock())
        self.data.move_to_end(key)
        while len(self.data) > self.capacity:
            self.data.popitem(last=False)
            self.evictions += 1

    def __len__(self):
        for k in [k for k in self.data if self._expired(k)]:
            del self.data[k]
        return len(self.data)

    def stats(self):
        return {"hits": self.hits, "misses": self.misses, "evictions": self.evictions}
EOF
