"""Union-find over hashable keys: what `rlvr data split` joins into one group (near duplicates,
a semantic cluster's prompts) and what `rlvr data check` joins into one cluster."""

from __future__ import annotations

from collections.abc import Hashable


class Groups:
    def __init__(self) -> None:
        self.parent: dict[Hashable, Hashable] = {}

    def find(self, key: Hashable) -> Hashable:
        self.parent.setdefault(key, key)
        while self.parent[key] != key:
            self.parent[key] = self.parent[self.parent[key]]
            key = self.parent[key]
        return key

    def join(self, a: Hashable, b: Hashable) -> bool:
        """Join the groups of `a` and `b`; False when they were one already. The smaller key
        stands for the joined group."""
        ra, rb = self.find(a), self.find(b)
        if ra == rb:
            return False
        self.parent[max(ra, rb)] = min(ra, rb)  # type: ignore[type-var]
        return True
