"""Limits of the reward service: evaluations in flight and request body size.

Both answer at once instead of queueing without bound: a request whose evaluations would
exceed the in-flight limit is refused whole (503 with Retry-After: nothing of it ran), and
a body past the size limit is refused before it is read in full (413).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator

from cuda_agent.errors import PoolOverloadedError


class TooLargeError(ValueError):
    """A request body or batch over the service's limits."""


class Admission:
    """Counts evaluations admitted and not answered; one event loop, so no lock is needed."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.in_flight = 0

    @contextlib.contextmanager
    def admit(self, count: int) -> Iterator[None]:
        """Hold `count` slots for the duration; `PoolOverloadedError` if they are not all free now."""
        if self.in_flight + count > self.capacity:
            raise PoolOverloadedError(f"{self.in_flight} evaluations in flight, limit {self.capacity}; retry later")
        self.in_flight += count
        try:
            yield
        finally:
            self.in_flight -= count


async def read_limited(chunks: AsyncIterator[bytes], declared: str | None, limit: int) -> bytes:
    """The whole body, refusing (TooLargeError) a declared or actual size over `limit` bytes."""
    if declared is not None:
        try:
            size = int(declared)
        except ValueError:
            raise TooLargeError(f"Content-Length {declared!r} is not a number") from None
        if size > limit:
            raise TooLargeError(f"request body of {size} bytes exceeds the limit of {limit} bytes; "
                                "send fewer samples per request")
    body = bytearray()
    async for chunk in chunks:
        body += chunk
        if len(body) > limit:
            raise TooLargeError(f"request body exceeds the limit of {limit} bytes; send fewer samples per request")
    return bytes(body)
