"""Duplicate detection by normalised-source hash (see `similarity.normalized_hash`)."""

from __future__ import annotations

from collections.abc import Iterable

from cuda_agent.data_gen.similarity import normalized_hash


class Deduper:
    """Remembers the normal forms seen so far; two sources that differ only in identifiers,
    constants (shapes, sizes), comments or layout count as duplicates."""

    def __init__(self, sources: Iterable[str] = ()) -> None:
        self._seen: set[str] = set()
        for source in sources:
            self.add(source)

    def __len__(self) -> int:
        return len(self._seen)

    def keys(self) -> frozenset[str]:
        """Normal-form hashes seen so far."""
        return frozenset(self._seen)

    @staticmethod
    def key(source: str) -> str | None:
        """Normal-form hash of `source` (None if it does not parse)."""
        try:
            return normalized_hash(source)
        except SyntaxError:
            return None

    def add(self, source: str) -> bool:
        """Record `source`; True if it was new. A source that does not parse counts as new."""
        key = self.key(source)
        if key is None:
            return True
        if key in self._seen:
            return False
        self._seen.add(key)
        return True
