"""Glob and Grep (Python `re` over the workspace files, read through the sandbox)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from cuda_agent.errors import ToolCallError
from cuda_agent.tools.args import GlobArgs, GrepArgs
from cuda_agent.sandbox_pool.terminal.globbing import compile_glob, glob_match
from cuda_agent.tools.observation import ToolErrorKind, ToolObservation, ToolUsageError
from cuda_agent.tools.paths import ROOT, resolve
from cuda_agent.tools.registry import tool
from cuda_agent.tools.session import ToolSession
from cuda_agent.tools.text import cut_line, decode, looks_binary

SKIPPED_DIRS = ("__pycache__", ".git")
READ_CONCURRENCY = 16


def _under(relative: str, base: str) -> str | None:
    """`relative` as a path below directory `base`, or None when it is not below it."""
    if base == ROOT:
        return relative
    prefix = base.rstrip("/") + "/"
    return relative[len(prefix) :] if relative.startswith(prefix) else None


def _skipped(relative: str) -> bool:
    return any(part in SKIPPED_DIRS for part in relative.split("/"))


async def _files_below(session: ToolSession, base: str) -> list[str]:
    """All workspace files below `base` (its own path when `base` is a file)."""
    every = sorted(path for path in await session.sandbox.list_files("**/*") if not _skipped(path))
    if base in every:
        return [base]
    below = [path for path in every if _under(path, base) is not None]
    if not below and base != ROOT and not await asyncio.to_thread((session.workspace / base).is_dir):
        raise ToolUsageError(
            ToolErrorKind.NOT_FOUND,
            f"path '{base}' is not a file or a non-empty directory of the workspace. Use Glob to list files.",
        )
    return below


def _bad_pattern(pattern: str, what: str) -> None:
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise ToolUsageError(
            ToolErrorKind.BAD_PATH,
            f"{what} '{pattern}' must be relative (no leading '/' and no '..'); use path for the directory.",
        )


@tool("Glob", GlobArgs)
async def glob(session: ToolSession, args: GlobArgs) -> ToolObservation:
    """Files under `path` whose path relative to `path` matches `pattern`, sorted."""
    _bad_pattern(args.pattern, "pattern")
    base = await resolve(session, args.path or ROOT, what="path")
    regex = compile_glob(args.pattern)
    matches = []
    for relative in await _files_below(session, base):
        inner = _under(relative, base) if relative != base else relative.rsplit("/", 1)[-1]
        if inner is not None and regex.match(inner):
            matches.append(relative)
    if not matches:
        return ToolObservation(name="Glob", text=f"No files match '{args.pattern}' under '{base}'.")
    limit = session.config.glob_max_results
    text = "\n".join(matches[:limit])
    if len(matches) > limit:
        text += f"\n[{len(matches) - limit} more files not shown; use a narrower pattern or path]"
    return ToolObservation(name="Glob", text=text, metrics={"matches": float(len(matches))})


def _compile(args: GrepArgs) -> re.Pattern[str]:
    try:
        return re.compile(args.pattern, re.IGNORECASE if args.case_insensitive else 0)
    except re.error as exc:
        raise ToolUsageError(
            ToolErrorKind.INVALID_PATTERN,
            f"pattern is not a valid Python regular expression: {exc}. Escape special characters "
            "such as ( ) [ ] { } . * + ? with a backslash to match them literally.",
        ) from exc


def _sizes(workspace: Path, paths: list[str]) -> dict[str, int]:
    if not workspace.exists():
        return {}
    return {path: (workspace / path).stat().st_size for path in paths if (workspace / path).is_file()}


async def _texts(session: ToolSession, paths: list[str]) -> dict[str, str]:
    """Contents of the searchable files: not too large, not binary, still present."""
    sizes = await asyncio.to_thread(_sizes, session.workspace, paths)
    limit = session.config.grep_max_file_bytes
    wanted = [p for p in paths if sizes.get(p, 0) <= limit][: session.config.grep_max_files]
    semaphore = asyncio.Semaphore(READ_CONCURRENCY)

    async def one(path: str) -> tuple[str, bytes | None]:
        async with semaphore:
            try:
                return path, await session.sandbox.read_file(path)
            except (FileNotFoundError, IsADirectoryError, PermissionError, ToolCallError):  # vanished, a link
                return path, None

    pairs = await asyncio.gather(*(one(p) for p in wanted))
    return {p: decode(d) for p, d in pairs if d is not None and len(d) <= limit and not looks_binary(d)}


def _context(args: GrepArgs) -> tuple[int, int]:
    before = args.before if args.before is not None else (args.context or 0)
    after = args.after if args.after is not None else (args.context or 0)
    return before, after


def _content_lines(path: str, lines: list[str], hits: list[int], args: GrepArgs, max_chars: int) -> list[str]:
    before, after = _context(args)
    shown: list[int] = []
    for hit in hits:
        shown.extend(range(max(hit - before, 0), min(hit + after, len(lines) - 1) + 1))
    out, previous, hit_set = [], None, set(hits)
    for index in sorted(set(shown)):
        if previous is not None and index != previous + 1:
            out.append("--")
        sep = ":" if index in hit_set else "-"
        number = f"{index + 1}{sep}" if args.line_numbers else ""
        out.append(f"{path}{sep}{number}{cut_line(lines[index], max_chars)}")
        previous = index
    return out


def _render(results: dict[str, list[int]], texts: dict[str, str], args: GrepArgs, max_line: int) -> list[str]:
    if args.output_mode == "files_with_matches":
        return list(results)
    if args.output_mode == "count":
        return [f"{path}:{len(hits)}" for path, hits in results.items()]
    out: list[str] = []
    for path, hits in results.items():
        if out and (args.before or args.after or args.context):
            out.append("--")
        out.extend(_content_lines(path, texts[path].splitlines(), hits, args, max_line))
    return out


def _limit(lines: list[str], args: GrepArgs, max_chars: int) -> str:
    notices = []
    if args.head_limit is not None and len(lines) > args.head_limit:
        notices.append(f"[{len(lines) - args.head_limit} more lines not shown (head_limit={args.head_limit})]")
        lines = lines[: args.head_limit]
    text, used, kept = "", 0, 0
    for line in lines:
        if used + len(line) + 1 > max_chars - 200:
            notices.append(f"[output cut after {kept} lines; narrow the search with path, glob or head_limit]")
            break
        used += len(line) + 1
        kept += 1
    text = "\n".join(lines[:kept])
    return "\n".join([text, *notices]) if notices else text


@tool("Grep", GrepArgs)
async def grep(session: ToolSession, args: GrepArgs) -> ToolObservation:
    """Lines matching a Python regex in the files under `path` (filtered by `glob`)."""
    regex = _compile(args)
    if args.glob:
        _bad_pattern(args.glob, "glob")
    base = await resolve(session, args.path or ROOT, what="path")
    paths = [p for p in await _files_below(session, base) if not args.glob or glob_match(args.glob, p)]
    texts = await _texts(session, paths)
    results = {}
    for path in sorted(texts):
        hits = [i for i, line in enumerate(texts[path].splitlines()) if regex.search(line)]
        if hits:
            results[path] = hits
    if not results:
        where = f"'{base}'" + (f" (glob '{args.glob}')" if args.glob else "")
        return ToolObservation(name="Grep", text=f"No matches for /{args.pattern}/ in {where}.")
    lines = _render(results, texts, args, session.config.read_max_line_chars)
    text = _limit(lines, args, session.config.max_output_chars)
    matches = sum(len(hits) for hits in results.values())
    return ToolObservation(
        name="Grep", text=text, metrics={"files": float(len(results)), "matches": float(matches)}
    )
