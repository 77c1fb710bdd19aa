"""The per-size program cache: a graph with symbolic sizes (torch.compile's SymbolicEngineGraph,
a loaded airgraph file's SizedGraph) keeps one compiled program per binding of its sizes, built on
the first call that needs it, up to a number of bindings (the least recently used goes first).

Safe under threads: a hit reads the dict and moves its key to the end without a lock (each is one
C-level OrderedDict operation under the GIL; a key evicted in between is simply not moved), a miss
builds under the lock, so that concurrent first calls of one size build it once.
"""
from __future__ import annotations

import collections
import threading


class ProgramCache:
    """key -> program, built by `build(key)` on a miss and kept up to `capacity` keys (LRU)."""

    def __init__(self, build, capacity: int):
        self.build = build
        self.capacity = max(1, int(capacity))
        self._programs: collections.OrderedDict = collections.OrderedDict()
        self.lock = threading.Lock()

    def get(self, key, check=None, args=None):
        """The program of `key`; on a miss, `check(key, args)` (if given) runs first, under the lock,
        and may refuse the key by raising."""
        p = self._programs.get(key)
        if p is not None:
            try:
                self._programs.move_to_end(key)  # least recently used goes first
            except KeyError:
                pass  # evicted by a concurrent build just now: the program still serves this call
            return p
        with self.lock:
            p = self._programs.get(key)
            if p is None:
                if check is not None:
                    check(key, args)
                p = self.build(key)
                self.put(key, p)
        return p

    def put(self, key, program) -> None:
        """Keeps `program` for `key` (the caller holds the lock, or no other thread can see it yet)."""
        self._programs[key] = program
        while len(self._programs) > self.capacity:
            self._programs.popitem(last=False)

    def __len__(self) -> int:
        return len(self._programs)

    def __contains__(self, key) -> bool:
        return key in self._programs

    def keys(self) -> list:
        return list(self._programs.keys())

    def values(self) -> list:
        return list(self._programs.values())

    def items(self) -> list:
        return list(self._programs.items())
