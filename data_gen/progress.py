"""Progress reporting between the stage APIs (which never print) and the CLI (rich bars)."""

from __future__ import annotations

from collections.abc import Callable

ProgressFn = Callable[[int, int], None]
"""Called as ``progress(done, total)`` after each item; the CLI turns it into a rich progress bar."""


def no_progress(done: int, total: int) -> None:
    """The default: report nothing."""
    del done, total
