"""Edit and MultiEdit: exact string replacement, unique unless replace_all, all or nothing."""

from __future__ import annotations

import re

from cuda_agent.tools.args import EditArgs, EditOp, MultiEditArgs
from cuda_agent.tools.fileio import exists, read_text, write_text
from cuda_agent.tools.observation import ToolErrorKind, ToolObservation, ToolUsageError
from cuda_agent.tools.paths import resolve_writable
from cuda_agent.tools.registry import tool
from cuda_agent.tools.session import ToolSession
from cuda_agent.tools.text import numbered

_LINE_PREFIX = re.compile(r"^\s*\d+\t", re.MULTILINE)
SNIPPET_LINES = 4


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _not_found_hint(text: str, old: str) -> str:
    if _LINE_PREFIX.match(old):
        return (
            " old_string seems to start with a line-number prefix from Read ('   12<TAB>'); "
            "copy only the text after the tab."
        )
    wanted = [" ".join(line.split()) for line in old.strip("\n").splitlines()]
    lines = [" ".join(line.split()) for line in text.splitlines()]
    for start in range(len(lines) - len(wanted) + 1):
        if wanted and lines[start : start + len(wanted)] == wanted:
            return (
                f" A match ignoring indentation/whitespace exists at line {start + 1}; "
                "copy the exact text, spaces and tabs included."
            )
    return " Read the file again to get its current exact text."


def apply_edit(text: str, op: EditOp, path: str) -> tuple[str, int, int]:
    """Apply one edit; returns (new text, replacements, index of the first replacement)."""
    if op.old_string == op.new_string:
        raise ToolUsageError(ToolErrorKind.NO_CHANGE, "old_string and new_string are identical; nothing to change.")
    if op.old_string == "":
        if text:
            raise ToolUsageError(
                ToolErrorKind.INVALID_ARGUMENTS,
                f"old_string is empty but '{path}' is not: give the exact text to replace, "
                "or use Write to replace the whole file.",
            )
        return op.new_string, 1, 0
    count = text.count(op.old_string)
    if count == 0:
        raise ToolUsageError(
            ToolErrorKind.NO_MATCH, f"old_string was not found in '{path}'." + _not_found_hint(text, op.old_string)
        )
    first = text.index(op.old_string)
    if count > 1 and not op.replace_all:
        starts = [m.start() for m in re.finditer(re.escape(op.old_string), text)][:10]
        lines = ", ".join(str(_line_of(text, s)) for s in starts)
        raise ToolUsageError(
            ToolErrorKind.AMBIGUOUS_MATCH,
            f"old_string occurs {count} times in '{path}' (lines {lines}). Include more surrounding "
            "lines to make it unique, or set replace_all=true to replace every occurrence.",
        )
    if op.replace_all:
        return text.replace(op.old_string, op.new_string), count, first
    return text.replace(op.old_string, op.new_string, 1), 1, first


def _snippet(text: str, index: int, new_string: str, max_line_chars: int) -> str:
    lines = text.splitlines()
    start = max(_line_of(text, index) - SNIPPET_LINES, 1)
    end = min(_line_of(text, index + len(new_string)) + SNIPPET_LINES, len(lines))
    return numbered(lines[start - 1 : end], start, max_line_chars)


async def _load(session: ToolSession, relative: str, raw: str, creating: bool) -> str:
    if await exists(session, relative):
        return await read_text(session, relative, raw)
    if creating:
        return ""
    raise ToolUsageError(
        ToolErrorKind.NOT_FOUND,
        f"File '{raw}' does not exist. Create it with Write (or an Edit with an empty old_string); "
        "use Glob to see which files exist.",
    )


@tool("Edit", EditArgs)
async def edit(session: ToolSession, args: EditArgs) -> ToolObservation:
    """Replace `old_string` by `new_string` in one file."""
    relative = await resolve_writable(session, args.file_path)
    op = EditOp(old_string=args.old_string, new_string=args.new_string, replace_all=args.replace_all)
    async with session.write_lock:
        text = await _load(session, relative, args.file_path, creating=args.old_string == "")
        new_text, count, first = apply_edit(text, op, args.file_path)
        await write_text(session, relative, args.file_path, new_text)
    snippet = _snippet(new_text, first, args.new_string, session.config.read_max_line_chars)
    return ToolObservation(
        name="Edit",
        text=f"Edited {relative}: {count} replacement(s). The edited region now reads:\n{snippet}",
        metrics={"replacements": float(count)},
    )


@tool("MultiEdit", MultiEditArgs)
async def multi_edit(session: ToolSession, args: MultiEditArgs) -> ToolObservation:
    """Apply every edit in order to the file's text, then write once; any failure writes nothing."""
    relative = await resolve_writable(session, args.file_path)
    async with session.write_lock:
        text = await _load(session, relative, args.file_path, creating=args.edits[0].old_string == "")
        total = 0
        for number, op in enumerate(args.edits, start=1):
            try:
                text, count, _ = apply_edit(text, op, args.file_path)
            except ToolUsageError as exc:
                raise ToolUsageError(
                    exc.kind,
                    f"Edit {number} of {len(args.edits)} failed, so no edit was applied: {exc} "
                    "(each edit applies to the result of the previous ones).",
                ) from exc
            total += count
        await write_text(session, relative, args.file_path, text)
    return ToolObservation(
        name="MultiEdit",
        text=f"Applied {len(args.edits)} edit(s) to {relative} ({total} replacement(s)).",
        metrics={"replacements": float(total)},
    )
