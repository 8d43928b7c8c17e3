"""Content-addressed build of a candidate's kernels into the module `cuda_extension`.

Every translation unit is compiled to an object keyed by (toolchain, flags, its source,
the headers it can see); unchanged units are never rebuilt, the fixed binding.cpp is
compiled once per toolchain, units compile in parallel, and the link is keyed by its
objects. Only the candidate's own files (model_new.py is not compiled) and our trusted
templates enter the build: nothing else from a workspace is read.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import shutil
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.sandbox_pool.harness.compiler.diagnostics import summarize_compiler_output
from cuda_agent.sandbox_pool.harness.compiler.jail import Jail, jail_for, toolchain_paths
from cuda_agent.sandbox_pool.harness.compiler.pch import ensure_pch
from cuda_agent.sandbox_pool.harness.compiler.symbols import prescan
from cuda_agent.sandbox_pool.harness.compiler import expansion, glue
from cuda_agent.sandbox_pool.harness.compiler.toolchain import CXX_STD, Toolchain, detect_toolchain

TEMPLATES = Path(__file__).resolve().parents[2] / "workspace" / "templates"
FIXED_SOURCES = ("binding.cpp", "binding_registry.h")
HEADER_SUFFIXES = (".h", ".hpp", ".cuh")


class BuildResult(BaseModel):
    """Outcome of building one candidate."""

    model_config = ConfigDict(extra="forbid")

    ok: bool = Field(description="True if cuda_extension was built.")
    so_path: str | None = Field(None, description="Path of the built module (in the cache).")
    real_header_units: list[str] = Field(
        default_factory=list, description="Binding units the fast glue could not build (compiled with the real headers).")
    objects: list[str] = Field(default_factory=list,
                               description="Object files of the candidate's units (kernels/), in the cache: what the symbol policy reads.")
    expanded_violations: list[str] = Field(
        default_factory=list,
        description="What the source policy refuses in the candidate's lines as the compiler read them, macros expanded.")
    log: str = Field("", description="Concise compiler / linker diagnostics.")
    cached: bool = Field(False, description="Every unit and the link came from the cache.")
    timed_out: bool = Field(False, description="The compile exceeded its time limit.")
    duration_s: float = Field(0.0, description="Wall time of the build.")
    units_compiled: int = Field(0, description="Translation units actually compiled (cache misses).")
    toolchain: str = Field("", description="Toolchain description.")
    key: str = Field("", description="Content key of the linked module.")


class _CompileFailed(Exception):
    def __init__(self, log: str, timed_out: bool = False) -> None:
        super().__init__(log)
        self.log = log
        self.timed_out = timed_out


def default_cache_dir() -> Path:
    """$CUDA_AGENT_CACHE, else ~/.cache/cuda_agent."""
    return Path(os.environ.get("CUDA_AGENT_CACHE") or Path.home() / ".cache" / "cuda_agent")


def _sha(*parts: str | bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part if isinstance(part, bytes) else part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def _unit_flags(tc: Toolchain, path: str) -> tuple[str, list[str]]:
    """(compiler, flags) of one unit. Bindings are glue: -O0 compiles them 3x faster."""
    includes = [f"-I{d}" for d in tc.include_dirs] + ["-I.", "-Ikernels"]
    if path.endswith(".cu"):
        arch = tc.cuda_arch or "90"
        return tc.nvcc or "nvcc", [
            "-O3", "-std=c++17", "-lineinfo", "-Xcompiler", "-fPIC", "--expt-relaxed-constexpr",
            f"-gencode=arch=compute_{arch},code=sm_{arch}", "-w", *includes,
        ]
    glue = path == "binding.cpp" or path.endswith("_binding.cpp")
    opt = ["-O0"] if glue else (["-O3", "-march=native", "-fopenmp"] if tc.device == "cpu" else ["-O2"])
    return tc.cxx, [CXX_STD, "-fPIC", *opt, "-w", *tc.defines, *includes]


class _Build:
    """One build: stage sources, compile units, link."""

    def __init__(self, files: dict[str, str], tc: Toolchain, cache: Path, deadline: float) -> None:
        self.tc = tc
        self.cache = cache / "build" / f"{tc.fingerprint}-{glue.fingerprint()}"
        self.deadline = deadline
        self.sources = {name: (TEMPLATES / name).read_text() for name in FIXED_SOURCES}
        self.sources["binding.cpp"] = glue.fixed_binding_cpp()  # the template's, plus the fast glue's functions
        self.sources.update(glue.staged_headers())
        self.sources.update({k: v for k, v in files.items() if k.startswith("kernels/")})
        self.compiled = 0
        self.objects: list[Path] = []
        self.expanded_violations: list[str] = []
        self.real_header_units: list[str] = []
        self.pch_root = cache / "pch"

    def units(self) -> list[str]:
        cxx_units = [p for p in self.sources if p.endswith((".cpp", ".cc"))]
        cu_units = [p for p in self.sources if p.endswith(".cu")]
        if self.tc.device == "cpu" and cu_units:
            raise _CompileFailed(
                f"{', '.join(cu_units)}: .cu files need the cuda device; on the cpu device write "
                "kernels/<name>.cpp (C++ loops + binding)"
            )
        return sorted(cxx_units + cu_units)

    def unit_key(self, path: str, compiler: str, flags: list[str]) -> str:
        headers = sorted((p, s) for p, s in self.sources.items() if p.endswith(HEADER_SUFFIXES))
        return _sha(compiler, *flags, path, self.sources[path], *(f"{p}\n{s}" for p, s in headers))

    def remaining(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise _CompileFailed("compile timed out", timed_out=True)
        return left

    async def run(self, stage: Path) -> tuple[Path, bool]:
        for rel, text in self.sources.items():
            (stage / rel).parent.mkdir(parents=True, exist_ok=True)
            (stage / rel).write_text(text)
        units = self.units()
        if not any(u.startswith("kernels/") for u in units):
            raise _CompileFailed("no kernel sources: add kernels/<name>.cu + kernels/<name>_binding.cpp "
                                 "(cuda) or kernels/<name>.cpp (cpu)")
        objects = await asyncio.gather(*(self.compile_unit(stage, u) for u in units), return_exceptions=True)
        failures = [o for o in objects if isinstance(o, BaseException)]
        if failures:
            for f in failures:
                if not isinstance(f, _CompileFailed):
                    raise f
            timed_out = any(f.timed_out for f in failures)  # type: ignore[union-attr]
            raise _CompileFailed("\n".join(f.log for f in failures), timed_out)  # type: ignore[union-attr]
        linked = [o for o in objects if isinstance(o, Path)]
        self.objects = [o for u, o in zip(units, linked) if u.startswith("kernels/")]
        self.expanded_violations = sorted({v for o in self.objects for v in _read_memo(o)})
        # The objects' machine-code scan (symbols.prescan, ~0.3 s for a large unit) runs while they link;
        # its outcome is cached beside them for the symbol check. A failure here is that check's to report.
        link, _ = await asyncio.gather(self.link(linked), prescan(self.objects), return_exceptions=True)
        if isinstance(link, BaseException):
            raise link
        return link

    async def compile_unit(self, stage: Path, path: str) -> Path:
        compiler, flags = _unit_flags(self.tc, path)
        if glue.eligible(path, self.sources[path]):
            obj = await self.compile_fast(stage, path, compiler, flags)
            if obj is not None:
                return obj
        obj = self.cache / "obj" / f"{self.unit_key(path, compiler, flags)}.o"
        if _cached(obj, path):
            return obj
        if not path.endswith(".cu") and "#include <torch/" in self.sources[path]:
            pch = await ensure_pch(self.cache.parent.parent, compiler, flags, self.tc.device, self.remaining())
            if pch is not None:
                flags = [*flags, "-include", str(pch)]
        return await self.compile_to(stage, path, compiler, flags, obj)

    async def compile_fast(self, stage: Path, path: str, compiler: str, flags: list[str]) -> Path | None:
        """The unit built with the fast glue, or None when it needs the real headers (remembered)."""
        flags = glue.flags(flags)
        key = self.unit_key(path, compiler, flags)
        obj = self.cache / "obj" / f"{key}.o"
        needs_real_headers = obj.with_suffix(".real")
        if _cached(obj, path):
            return obj
        if needs_real_headers.exists():
            self.real_header_units.append(path)
            return None
        pch = await ensure_pch(self.cache.parent.parent, compiler, flags, self.tc.device, self.remaining(),
                               text=glue.pch_text(self.tc.device))
        if pch is not None:
            flags = [*flags, "-include", str(pch)]
        try:
            return await self.compile_to(stage, path, compiler, flags, obj)
        except _CompileFailed as exc:
            if exc.timed_out:
                raise
            obj.parent.mkdir(parents=True, exist_ok=True)
            needs_real_headers.write_text(exc.log[:4000])
            self.real_header_units.append(path)
            return None

    async def compile_to(self, stage: Path, path: str, compiler: str, flags: list[str], obj: Path) -> Path:
        keep = stage / f"{obj.stem}.{secrets.token_hex(4)}"  # the compiler writes in the stage folder only
        keep.mkdir()
        out = keep / "unit.o"
        candidate = path.startswith("kernels/")
        extra = expansion.keep_flags(compiler, keep) if candidate else []
        await self.exec([compiler, "-c", path, *flags, *extra, "-o", str(out)], stage)
        if candidate:  # the memo first: a published object always has its expanded-source scan
            found = await asyncio.to_thread(expansion.scan, keep, stage)
            _publish_text("".join(f"{v}\n" for v in found), _memo(obj))
        _publish(out, obj)
        shutil.rmtree(keep, ignore_errors=True)
        self.compiled += 1
        return obj

    async def link(self, objects: list[Path]) -> tuple[Path, bool]:
        key = _sha(*(o.name for o in objects))
        so = self.cache / "so" / key / "cuda_extension.so"
        if so.exists():
            return so, True
        so.parent.mkdir(parents=True, exist_ok=True)
        libs = ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"]
        extra = ["-fopenmp"] if self.tc.device == "cpu" else ["-lc10_cuda", "-ltorch_cuda", "-lcudart"]
        text = "\n".join(self.sources.values())
        if self.tc.device == "cuda" and "cublas" in text:
            extra += ["-lcublas", "-lcublasLt"]
        if self.tc.device == "cuda" and "cudnn" in text:
            extra += ["-lcudnn"]
        lib_dirs = [f"-L{d}" for d in self.tc.library_dirs]
        rpaths = [f"-Wl,-rpath,{d}" for d in self.tc.library_dirs]
        stage = Path(tempfile.mkdtemp(prefix="cuda_agent_link_"))
        try:
            out = stage / "cuda_extension.so"
            await self.exec([self.tc.cxx, "-shared", *map(str, objects), "-o", str(out), *lib_dirs, *rpaths, *libs,
                             *extra], stage, readable_files=objects)
            _publish(out, so)
        finally:
            shutil.rmtree(stage, ignore_errors=True)
        return so, False

    def jail(self) -> Jail | None:
        """The compiler's jail (jail.py): it sees the toolchain and its stage folder only; None where
        bubblewrap cannot run. Probed at the first compile of the process, not for a cached build."""
        self.pch_root.mkdir(parents=True, exist_ok=True)
        return jail_for(self.tc.cxx, toolchain_paths([self.tc.cxx, self.tc.nvcc], self.tc.include_dirs,
                                                     self.tc.library_dirs, self.tc.cuda_home,
                                                     [glue.GLUE_DIR, self.pch_root]))

    async def exec(self, argv: list[str], cwd: Path, readable_files: list[Path] | None = None) -> None:
        """Run a compiler or the linker in `cwd` (in the jail when there is one: it sees the toolchain,
        `cwd` and `readable_files`)."""
        jail = await asyncio.to_thread(self.jail)  # its first call probes (a compile): off the event loop
        if jail is not None:
            argv = jail.wrap(argv, cwd, readable_files or [])
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=str(cwd), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True, env=_compiler_env(cwd),
        )
        try:
            async with asyncio.timeout(self.remaining()):
                out, _ = await proc.communicate()
        except TimeoutError:
            _kill_group(proc)
            await proc.wait()
            raise _CompileFailed("compile timed out", timed_out=True) from None
        except asyncio.CancelledError:
            _kill_group(proc)
            raise
        if proc.returncode != 0:
            raise _CompileFailed(summarize_compiler_output(out.decode(errors="replace")))


def _memo(obj: Path) -> Path:
    return obj.with_name(obj.name + expansion.MEMO_SUFFIX)


def _cached(obj: Path, path: str) -> bool:
    """`obj` is in the cache with everything its unit needs (a candidate unit: its expanded-source scan)."""
    return obj.exists() and (not path.startswith("kernels/") or _memo(obj).exists())


def _read_memo(obj: Path) -> list[str]:
    return [line for line in _memo(obj).read_text().splitlines() if line]


def _publish_text(text: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f"{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    tmp.write_text(text)
    tmp.replace(target)


def _publish(built: Path, target: Path) -> None:
    """Move a file the compiler wrote in its stage folder into the cache, atomically."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(f".{os.getpid()}.{secrets.token_hex(4)}.tmp{target.suffix}")
    shutil.copy(built, tmp)  # with its mode
    tmp.replace(target)


_ENV_KEPT = ("PATH", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "LANG", "LC_ALL")


def _compiler_env(cwd: Path) -> dict[str, str]:
    """A minimal environment for compiling candidate code: the worker's own variables (keys,
    tokens) must not be readable by a kernel that embeds /proc/self/environ at compile time."""
    env = {k: os.environ[k] for k in _ENV_KEPT if k in os.environ}
    env.update(HOME=str(cwd), TMPDIR=str(cwd))
    return env


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, 9)
    except ProcessLookupError:
        pass


async def build_extension(
    files: dict[str, str], device: str, *, cache_dir: Path | None = None, timeout_s: float = 300.0
) -> BuildResult:
    """Build `files` (candidate paths -> text) into cuda_extension for `device`.

    Compile errors and time-outs are results (ok=False), never exceptions; a broken
    toolchain raises `InfraError`.
    """
    started = time.monotonic()
    cache = Path(cache_dir or default_cache_dir())
    tc = detect_toolchain(device, cache)  # its record lives beside the compile cache
    build = _Build(files, tc, cache, started + timeout_s)
    stage = Path(tempfile.mkdtemp(prefix="cuda_agent_build_"))
    try:
        so, link_cached = await build.run(stage)
    except _CompileFailed as exc:
        return BuildResult(ok=False, log=exc.log, timed_out=exc.timed_out, duration_s=time.monotonic() - started,
                           units_compiled=build.compiled, toolchain=tc.description)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return BuildResult(
        ok=True, so_path=str(so), objects=[str(o) for o in build.objects], real_header_units=build.real_header_units,
        expanded_violations=build.expanded_violations, cached=link_cached and build.compiled == 0, units_compiled=build.compiled,
        duration_s=time.monotonic() - started, toolchain=tc.description, key=so.parent.name,
    )
