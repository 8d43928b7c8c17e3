"""Read and Write."""

from __future__ import annotations

from cuda_agent.tools.args import ReadArgs, WriteArgs
from cuda_agent.tools.fileio import exists, read_text, write_text
from cuda_agent.tools.observation import ToolErrorKind, ToolObservation, ToolUsageError
from cuda_agent.tools.paths import ROOT, resolve, resolve_writable
from cuda_agent.tools.registry import tool
from cuda_agent.tools.session import ToolSession
from cuda_agent.tools.text import numbered


@tool("Read", ReadArgs)
async def read(session: ToolSession, args: ReadArgs) -> ToolObservation:
    """Lines `offset`..`offset+limit-1` in `cat -n` form, cut to fit the output budget."""
    relative = await resolve(session, args.file_path)
    if relative == ROOT:
        raise ToolUsageError(ToolErrorKind.IS_DIRECTORY, "file_path is the workspace root; give a file.")
    text = await read_text(session, relative, args.file_path)
    lines = text.splitlines()
    if not lines:
        return ToolObservation(name="Read", text=f"(file '{args.file_path}' exists and is empty)")
    first = args.offset or 1
    if first > len(lines):
        raise ToolUsageError(
            ToolErrorKind.INVALID_ARGUMENTS,
            f"offset={first} is past the end of '{args.file_path}', which has {len(lines)} lines.",
        )
    limit = args.limit or session.config.read_default_limit
    body, shown = _fit(lines[first - 1 : first - 1 + limit], first, session)
    last = first + shown - 1
    if last < len(lines):
        body += (
            f"\n\n[showing lines {first}-{last} of {len(lines)}; "
            f"continue with offset={last + 1}]"
        )
    return ToolObservation(name="Read", text=body, metrics={"lines": float(shown)})


def _fit(lines: list[str], first: int, session: ToolSession) -> tuple[str, int]:
    """Render as many of `lines` as fit in max_output_chars; returns (text, lines shown)."""
    budget = session.config.max_output_chars - 200
    max_line = session.config.read_max_line_chars
    used, count = 0, 0
    for line in lines:
        used += min(len(line), max_line + 40) + 8
        if count and used > budget:
            break
        count += 1
    return numbered(lines[:count], first, max_line), count


@tool("Write", WriteArgs)
async def write(session: ToolSession, args: WriteArgs) -> ToolObservation:
    """Create or overwrite a file with `content`."""
    relative = await resolve_writable(session, args.file_path)
    async with session.write_lock:
        existed = await exists(session, relative)
        await write_text(session, relative, args.file_path, args.content)
    verb = "Overwrote" if existed else "Created"
    lines = len(args.content.splitlines())
    size = len(args.content.encode("utf-8"))
    return ToolObservation(name="Write", text=f"{verb} {relative} ({lines} lines, {size} bytes).")
