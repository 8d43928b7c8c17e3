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
        for path in SYSTEM_PATHS:
            if os.path.islink(path):  # /bin -> usr/bin on merged-/usr systems
                args += ["--symlink", os.readlink(path), path]
            elif os.path.exists(path):
                args += ["--ro-bind", path, path]
        stage_dir = str(stage)
        args += _mounts([*self.readable, *map(str, readable_files)], writable=[stage_dir])
        return [*args, "--chdir", os.path.realpath(stage_dir), "--", *argv]


def _mounts(readable: Iterable[str], writable: Iterable[str]) -> list[str]:
    """bwrap arguments that show each path at its real place (a folder inside another shown once) and,
    where a path the command names goes through a symlink (a cache under a linked home), that link."""
    shown: dict[str, str] = {}  # real path -> "--ro-bind" / "--bind"
    links: list[tuple[str, str]] = []
    for kind, paths in (("--ro-bind", readable), ("--bind", writable)):
        for path in paths:
            if not os.path.exists(path):
                continue
            real, named = os.path.realpath(path), os.path.abspath(path)
            shown[real] = "--bind" if kind == "--bind" else shown.get(real, kind)
            if named != real:
                links.append((named, real))
    args: list[str] = []
    outer = [p for p in SYSTEM_PATHS if os.path.isdir(p) and not os.path.islink(p)]  # shown by `wrap`
    for real in sorted(shown, key=len):
        if real == "/":  # a compiler in /bin of a system without merged /usr: the system folders have it
            continue
        if shown[real] == "--ro-bind" and _inside(real, outer):
            continue  # visible through a folder already shown
        args += [shown[real], real, real]
        outer.append(real)
    for named, real in links:
        if not _inside(named, [*outer, *SYSTEM_PATHS]):  # a link inside a shown folder is there already
            args += ["--symlink", real, named]
    return args


def _inside(path: str, folders: Iterable[str]) -> bool:
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in folders)


def toolchain_paths(compilers: Iterable[str | None], include_dirs: Iterable[str], library_dirs: Iterable[str],
                    cuda_home: str | None, extra: Iterable[str | Path]) -> tuple[str, ...]:
    """The folders a build reads besides the system's, as the build's flags name them: each
    compiler's own folder tree (its install), the include and library folders, the CUDA toolkit,
    `extra` (fast glue, precompiled headers)."""
    paths: list[str] = []
    for exe in compilers:
        if exe:
            resolved = shutil.which(exe) or exe
            paths.append(str(Path(os.path.realpath(resolved)).parent.parent))  # e.g. <cuda>/bin/nvcc -> <cuda>
    paths += [*include_dirs, *library_dirs, *([cuda_home] if cuda_home else []), *map(str, extra)]
    return tuple(sorted({os.path.abspath(p) for p in paths if os.path.isdir(p)}))


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
