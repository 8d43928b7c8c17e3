"""Read the symbols a built module imports (nm -DC) and apply the symbol policy."""

from __future__ import annotations

import asyncio
import shutil

from cuda_agent.errors import InfraError
from cuda_agent.sandbox_pool.harness.policy import symbol_violations


async def undefined_symbols(so_path: str) -> list[str]:
    """Demangled undefined dynamic symbols of `so_path`, without version suffixes."""
    nm = shutil.which("nm")
    if nm is None:
        raise InfraError("`nm` (binutils) not found; install binutils")
    proc = await asyncio.create_subprocess_exec(
        nm, "-D", "-C", "--undefined-only", so_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise InfraError(f"nm failed on {so_path}: {err.decode()[:500]}")
    symbols = []
    for line in out.decode(errors="replace").splitlines():
        name = line.strip()
        if name.startswith("U ") or name.startswith("w "):
            name = name[2:].strip()
        symbols.append(name.split("@")[0].strip())
    return symbols


async def check_module_symbols(so_path: str) -> list[str]:
    """Violations of the symbol policy by the module at `so_path`."""
    return symbol_violations(await undefined_symbols(so_path))
