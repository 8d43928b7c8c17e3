"""Small text helpers shared by the tools: truncation, binary detection, cat -n rendering."""

from __future__ import annotations

BINARY_SNIFF_BYTES = 8192


def truncate_middle(text: str, max_chars: int) -> tuple[str, bool]:
    """Keep the head and the tail of `text` (errors tend to be at the end)."""
    if len(text) <= max_chars:
        return text, False
    keep = max(max_chars - 120, 0)
    head, tail = text[: keep // 2], text[len(text) - keep // 2 :]
    omitted = len(text) - len(head) - len(tail)
    notice = f"\n\n... [output truncated: {omitted} characters omitted from the middle] ...\n\n"
    return head + notice + tail, True


def looks_binary(data: bytes) -> bool:
    """A NUL byte near the start marks a binary file (as grep and git decide)."""
    return b"\x00" in data[:BINARY_SNIFF_BYTES]


def decode(data: bytes) -> str:
    """UTF-8 with replacement characters for stray bytes."""
    return data.decode("utf-8", errors="replace")


def cut_line(line: str, max_chars: int) -> str:
    """`line` cut at `max_chars`, with a notice saying how long it was."""
    if len(line) <= max_chars:
        return line
    return f"{line[:max_chars]}... [line truncated: {len(line)} characters]"


def numbered(lines: list[str], first_line: int, max_line_chars: int) -> str:
    """`cat -n` style: right-aligned 1-based line number, a tab, the line."""
    return "\n".join(f"{first_line + i:>6}\t{cut_line(line, max_line_chars)}" for i, line in enumerate(lines))
