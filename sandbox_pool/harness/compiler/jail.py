"""The compiler's view of the file system: the toolchain, the build's own folder, nothing else.

A candidate's source can make the compiler read any file it can see: an `#include` whose error
quotes the file's lines in the compile log the agent reads, an assembler `.incbin` that embeds the
file in the module (its code can then return the bytes in an exception message). The static check
refuses every spelling the source shows (`static_check._file_violations`); macros can still
assemble one. So each compiler and linker process runs under bubblewrap (`bwrap`, Debian's
`bubblewrap`) with a fresh root: the system folders (`/usr`, `/lib*`, the dynamic linker's cache),
the toolchain's include and library folders, the CUDA toolkit, the fast glue and the precompiled
headers read-only; the build's stage folder writable; a private `/tmp`, `/dev` and `/proc`; no
network, no other process. Home folders, the project, the caches of other builds and the rest of
`/etc` are not there.

Used when `bwrap` is on the PATH and a probe compile succeeds in the jail (once per toolchain and
process); otherwise the compiler runs as before and a warning says so (`jail_for(...) is None`).
`CUDA_AGENT_COMPILER_JAIL=0` turns it off.
"""

from __future__ import annotations

import functools
import logging
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
                "/etc/alternatives", "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d")
"""What a compiler needs from the host besides its own folders (merged-/usr symlinks kept as links)."""
DISABLE_ENV = "CUDA_AGENT_COMPILER_JAIL"


@dataclass(frozen=True)
class Jail:
    """A bubblewrap command line for the compiler: `wrap(argv, stage)` is what to run."""

    bwrap: str
    readable: tuple[str, ...]

    def wrap(self, argv: list[str], stage: Path, readable_files: Iterable[str | Path] = ()) -> list[str]:
        """`argv` run in the jail with `stage` (its working folder) writable and `readable_files` visible."""
        args = [self.bwrap, "--unshare-all", "--die-with-parent", "--dev", "/dev", "--proc", "/proc",
                "--tmpfs", "/tmp"]
        for path in (*SYSTEM_PATHS, *self.readable, *map(str, readable_files)):
            args += _bind(path)
        stage_dir = os.path.realpath(stage)
        return [*args, "--bind", stage_dir, stage_dir, "--chdir", stage_dir, "--", *argv]


def _bind(path: str) -> list[str]:
    if os.path.islink(path) and path in SYSTEM_PATHS:  # /bin -> usr/bin on merged-/usr systems
        return ["--symlink", os.readlink(path), path]
    if not os.path.exists(path):
        return []
    real = os.path.realpath(path)
    return ["--ro-bind", real, real] + (["--symlink", real, path] if real != path and os.path.isabs(path) else [])


def toolchain_paths(compilers: Iterable[str | None], include_dirs: Iterable[str], library_dirs: Iterable[str],
                    cuda_home: str | None, extra: Iterable[str | Path]) -> tuple[str, ...]:
    """The folders a build reads besides the system's: each compiler's own folder tree (its install),
    the include and library folders, the CUDA toolkit, `extra` (fast glue, precompiled headers)."""
    paths: list[str] = []
    for exe in compilers:
        if exe:
            resolved = shutil.which(exe) or exe
            paths.append(str(Path(os.path.realpath(resolved)).parent.parent))  # e.g. <cuda>/bin/nvcc -> <cuda>
    paths += [*include_dirs, *library_dirs, *([cuda_home] if cuda_home else []), *map(str, extra)]
    unique: list[str] = []
    for path in sorted({os.path.realpath(p) for p in paths if os.path.isdir(p)}, key=len):
        if path == "/":  # a compiler in /bin of a system without merged /usr: the system folders have it
            continue
        if not any(path == u or path.startswith(u.rstrip("/") + "/") for u in unique):
            unique.append(path)  # a folder inside one already bound is visible through it
    return tuple(unique)


def jail_for(cxx: str, readable: tuple[str, ...]) -> Jail | None:
    """The jail for a toolchain whose folders are `readable`, if this machine can run it: bwrap is
    there and `cxx` compiles a probe unit in it. None (and a warning, once) otherwise, or when
    `CUDA_AGENT_COMPILER_JAIL=0`."""
    if os.environ.get(DISABLE_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    return _probed_jail(cxx, readable)


@functools.lru_cache(maxsize=8)
def _probed_jail(cxx: str, readable: tuple[str, ...]) -> Jail | None:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        logger.warning("bubblewrap (bwrap) is not installed: candidate compiles see this machine's whole file "
                       "system (install Debian's bubblewrap to confine them)")
        return None
    jail = Jail(bwrap, readable)
    stage = Path(tempfile.mkdtemp(prefix="cuda_agent_jail_probe_"))
    try:
        (stage / "probe.cpp").write_text("#include <cstdio>\nint probe() { return std::puts(\"ok\"); }\n")
        done = subprocess.run(jail.wrap([cxx, "-c", "probe.cpp", "-o", "probe.o"], stage),
                              capture_output=True, text=True, timeout=60, check=False)
        works = done.returncode == 0 and (stage / "probe.o").exists()
    except (OSError, subprocess.TimeoutExpired) as exc:
        works, done = False, None
        logger.debug("compiler jail probe: %s", exc)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    if not works:
        why = (done.stderr or done.stdout).strip().splitlines()[-1:] if done is not None else ["no answer"]
        logger.warning("the compiler jail (bubblewrap) does not work here (%s): candidate compiles see this "
                       "machine's whole file system", "; ".join(why) or f"exit {done.returncode if done else '?'}")
        return None
    return jail


__all__ = ["DISABLE_ENV", "Jail", "jail_for", "toolchain_paths"]
