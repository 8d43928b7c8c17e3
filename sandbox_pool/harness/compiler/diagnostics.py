"""Turn compiler output into a short report a model can act on."""

from __future__ import annotations

import re

_NOISE = (
    re.compile(r"^In file included from "),
    re.compile(r"^\s+from .*[:,]$"),
    re.compile(r"^compilation terminated\.$"),
    re.compile(r"^\d+ errors? detected in the compilation"),
    re.compile(r"^ninja: "),
)
_ERROR = re.compile(r"\berror\b", re.IGNORECASE)


def summarize_compiler_output(text: str, *, max_lines: int = 40, max_chars: int = 4000) -> str:
    """Keep the lines around errors; drop include chains and repeated noise."""
    lines = [line.rstrip() for line in text.splitlines()]
    kept = [line for line in lines if line and not any(p.search(line) for p in _NOISE)]
    first_error = next((i for i, line in enumerate(kept) if _ERROR.search(line)), 0)
    window = kept[max(0, first_error - 2) :]
    summary = "\n".join(window[:max_lines])
    if len(window) > max_lines:
        summary += f"\n... ({len(window) - max_lines} more lines)"
    if len(summary) > max_chars:
        summary = summary[:max_chars] + "\n... (truncated)"
    return summary
