"""Read the symbols that the candidate's compiled code needs from outside (nm) and apply the symbol policy.

The policy is applied to the object files, not to the linked module: the libraries that we link
(torch, the CUDA runtime, which nvcc's toolchain may link statically) are trusted and may use
files or system calls themselves; what the candidate's own code references is what matters.

A system call needs no symbol: inline assembly can make one. So each object's host machine code is
also disassembled (objdump) for system call instructions; no kernel or binding needs one (the
libraries they call make theirs). The disassembly of a large unit takes ~0.3 s, so its outcome is
kept beside the object in the content-addressed build cache (`<object>.calls`), made while the
builder links (`prescan`).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import tempfile
from pathlib import Path

from cuda_agent.errors import InfraError
from cuda_agent.sandbox_pool.harness.policy import symbol_violations

# nm's type letters of undefined references (plain, weak, weak object); every other letter is a definition.
_UNDEFINED = ("U", "w", "v")


async def _nm(path: str) -> str:
    try:
        async with asyncio.timeout(SCAN_TIMEOUT_S):
            return await _run("nm", "-C", path)
    except TimeoutError:
        raise UnreadableObject(f"nm did not finish within {SCAN_TIMEOUT_S:.0f} s") from None


def _parse(listing: str) -> tuple[set[str], set[str]]:
    """(undefined, defined) names of one `nm -C` listing."""
    undefined: set[str] = set()
    defined: set[str] = set()
    for line in listing.splitlines():
        parts = line.strip().split(" ", 2) if line[:1] != " " else ["", *line.strip().split(" ", 1)]
        if len(parts) != 3:
            continue
        _, kind, name = parts
        name = name.split("@")[0].strip()
        (undefined if kind in _UNDEFINED else defined).add(name)
    return undefined, defined


async def external_symbols(object_paths: list[str]) -> list[str]:
    """Demangled names that `object_paths` reference and none of them defines."""
    listings = await asyncio.gather(*(_nm(p) for p in object_paths))
    undefined: set[str] = set()
    defined: set[str] = set()
    for listing in listings:
        u, d = _parse(listing)
        undefined |= u
        defined |= d
    return sorted(undefined - defined)


class UnreadableObject(Exception):
    """nm or objdump failed on one of the candidate's objects (a missing tool is an `InfraError` instead)."""


async def check_object_symbols(object_paths: list[str]) -> list[str]:
    """Violations of the symbol policy by the candidate's compiled objects, system call instructions included.

    An object the binutils cannot read is a violation, not an infrastructure failure: the candidate's source
    shapes its objects (inline assembly, section directives), and an error here would leave it without a -1."""
    listed, scans = await asyncio.gather(external_symbols(object_paths), prescan(object_paths),
                                         return_exceptions=True)  # both finish: no tool left running
    for outcome in (listed, scans):
        if isinstance(outcome, UnreadableObject):
            return [f"the extension's objects cannot be checked ({outcome})"]
        if isinstance(outcome, BaseException):
            raise outcome
    return sorted(set(symbol_violations(listed)) | {v for found in scans for v in found})


# x86-64 `syscall`, `sysenter`, `int $0x80`; aarch64 `svc`: after objdump's "<address>:<tab>".
_SYSTEM_CALL = re.compile(r"^[ \t]*[0-9a-f]+:[ \t]+(syscall|sysenter|int[ \t]+\$0x80|svc)\b", re.MULTILINE)
_FUNCTION = re.compile(r"^[0-9a-f]+ <(.+)>:$", re.MULTILINE)


async def prescan(object_paths: list[str] | list[Path]) -> list[list[str]]:
    """Per object, its system call instructions as violations (cached beside the object)."""
    return list(await asyncio.gather(*(_system_calls(str(p)) for p in object_paths)))


async def _system_calls(path: str) -> list[str]:
    memo = Path(f"{path}.calls")
    try:
        return [line for line in memo.read_text().splitlines() if line]
    except OSError:
        pass
    try:
        found = _system_call_violations(await _disassembly(path))
    except TimeoutError:
        found = [f"the extension's machine code could not be scanned within {SCAN_TIMEOUT_S:.0f} s"]
    try:  # written whole or not at all; a read-only cache just scans again next time
        tmp = memo.with_name(f"{memo.name}.{os.getpid()}")
        tmp.write_text("".join(f"{v}\n" for v in found))
        os.replace(tmp, memo)
    except OSError:
        pass
    return found


_ONE_TEXT = "SECTIONS { .text : { *(.text .text.*) } }\n"
SCAN_TIMEOUT_S = 120.0


async def _disassembly(path: str) -> str:
    """objdump's disassembly of the object's code. A C++ unit keeps every inline function in a section
    of its own (thousands), which GNU objdump handles in time quadratic in their number (41 s for one
    2.6 MB binding unit), so a copy with them merged into one `.text` is disassembled (0.3 s)."""
    with tempfile.TemporaryDirectory(prefix="cuda_agent_scan_") as tmp:
        script, ungrouped, merged = Path(tmp, "one_text.ld"), Path(tmp, "ungrouped.o"), Path(tmp, "merged.o")
        script.write_text(_ONE_TEXT)
        target = path
        try:
            await _run("objcopy", "-R", ".group", path, str(ungrouped))
            await _run("ld", "-r", "-T", str(script), "-o", str(merged), str(ungrouped))
            target = str(merged)
        except UnreadableObject:
            pass  # an object these tools cannot merge is disassembled as it is
        async with asyncio.timeout(SCAN_TIMEOUT_S):  # an honest unit takes well under a second
            return await _run("objdump", "-d", "--no-show-raw-insn", target)


def _system_call_violations(listing: str) -> list[str]:
    found = []
    for match in _SYSTEM_CALL.finditer(listing):
        functions = _FUNCTION.findall(listing, 0, match.start())
        where = functions[-1] if functions else "?"
        found.append(f"the extension makes system calls itself (`{match.group(1)}` in {where}; "
                     "call the library functions your kernels need instead)")
    return sorted(set(found))


async def _run(tool: str, *args: str) -> str:
    exe = shutil.which(tool)
    if exe is None:
        raise InfraError(f"`{tool}` (binutils) not found; install binutils")
    proc = await asyncio.create_subprocess_exec(exe, *args, stdout=asyncio.subprocess.PIPE,
                                                stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await proc.communicate()
    except asyncio.CancelledError:  # timed out: no tool left running
        proc.kill()
        raise
    if proc.returncode != 0:
        raise UnreadableObject(f"{tool} failed on {Path(args[-1]).name}: {err.decode(errors='replace')[:300]}")
    return out.decode(errors="replace")
