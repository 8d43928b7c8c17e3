"""Read the symbols that the candidate's compiled code needs from outside (nm) and apply the symbol policy.

The policy is applied to the object files, not to the linked module: the libraries that we link
(torch, the CUDA runtime, which nvcc's toolchain may link statically) are trusted and may use
files or system calls themselves; what the candidate's own code references is what matters.
"""

from __future__ import annotations

import asyncio
import shutil

from cuda_agent.errors import InfraError
from cuda_agent.sandbox_pool.harness.policy import symbol_violations

# nm's type letters of undefined references (plain, weak, weak object); every other letter is a definition.
_UNDEFINED = ("U", "w", "v")


async def _nm(path: str) -> str:
    nm = shutil.which("nm")
    if nm is None:
        raise InfraError("`nm` (binutils) not found; install binutils")
    proc = await asyncio.create_subprocess_exec(
        nm, "-C", path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise InfraError(f"nm failed on {path}: {err.decode()[:500]}")
    return out.decode(errors="replace")


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


async def check_object_symbols(object_paths: list[str]) -> list[str]:
    """Violations of the symbol policy by the candidate's compiled objects."""
    return symbol_violations(await external_symbols(object_paths))
