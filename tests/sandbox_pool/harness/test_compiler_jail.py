"""The compiler's file system view (compiler/jail.py): a candidate's build cannot read a host file
however its source assembles the directive (the static check, the first line, is bypassed here on
purpose: `build_extension` is called directly), while honest builds still work in the jail."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.harness.compiler import build_extension
from cuda_agent.sandbox_pool.harness.compiler.jail import jail_for
from cuda_agent.sandbox_pool.workspace import read_candidate_files

ROOT = Path(__file__).resolve().parents[3]
SOLUTION = ROOT / "examples/solutions/diag_matmul/cpu_fast"
FILES = {"model_new.py": (SOLUTION / "model_new.py").read_text(),
         "kernels/diag_matmul.cpp": (SOLUTION / "kernels/diag_matmul.cpp").read_text()}

pytestmark = pytest.mark.skipif(jail_for("g++", ("/usr",)) is None,
                                reason="bubblewrap cannot run here (scripts/setup.sh installs it)")

# Each reads `{secret}` with a directive whose operand the source never spells out in one piece.
ASSEMBLED_READS = {
    "incbin from stringised pieces":
        '#define Q(x) #x\nasm(".section .rodata\\n" Q(.inc)Q(bin) " \\"{secret}\\"\\n.previous\\n");\n',
    "include from a macro": "#define Q(x) #x\n#define P(a, b) Q(a/b)\n#include P({folder}, secret.txt)\n",
}


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("build_cache")  # shared: the precompiled headers are built once


@pytest.mark.slow
@pytest.mark.parametrize("route", sorted(ASSEMBLED_READS))
def test_a_build_cannot_read_a_host_file(tmp_path: Path, cache: Path, route: str) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET_TOKEN_XYZ\n")
    source = ASSEMBLED_READS[route].format(secret=secret, folder=tmp_path) + FILES["kernels/diag_matmul.cpp"]
    result = asyncio.run(build_extension({**FILES, "kernels/diag_matmul.cpp": source}, "cpu", cache_dir=cache))
    assert not result.ok  # the file is not there for the compiler
    assert "SECRET_TOKEN_XYZ" not in result.log


@pytest.mark.slow
def test_an_honest_build_works_in_the_jail_and_its_result_is_cached(cache: Path) -> None:
    first = asyncio.run(build_extension(FILES, "cpu", cache_dir=cache))
    assert first.ok, first.log
    again = asyncio.run(build_extension(FILES, "cpu", cache_dir=cache))
    assert again.ok and again.cached and again.so_path == first.so_path


@pytest.mark.slow
def test_a_cache_and_a_stage_reached_through_symlinks_work(cache: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # The flags name the precompiled header and the stage by the paths the process sees.
    linked_cache, linked_tmp = tmp_path / "cache_link", tmp_path / "tmp_link"
    (tmp_path / "tmp_real").mkdir()
    linked_cache.symlink_to(cache)
    linked_tmp.symlink_to(tmp_path / "tmp_real")
    monkeypatch.setenv("TMPDIR", str(linked_tmp))
    monkeypatch.setattr("tempfile.tempdir", None)  # read TMPDIR again
    source = FILES["kernels/diag_matmul.cpp"] + "\n// a new unit: compiled, not served from the cache\n"
    result = asyncio.run(build_extension({**FILES, "kernels/diag_matmul.cpp": source}, "cpu", cache_dir=linked_cache))
    assert result.ok, result.log
    assert result.units_compiled >= 1


CUDA_SOLUTION = ROOT / "examples/solutions/diag_matmul/cuda_fast"
# the candidate's files only: on the GPU node gpu-env.sh byte-compiles the repository, and a __pycache__ .pyc
# read as text stopped this module's collection there (2026-12-07)
CUDA_FILES = read_candidate_files(CUDA_SOLUTION)


@pytest.mark.gpu
def test_nvcc_runs_in_the_jail_and_reads_no_host_file(tmp_path: Path, cache: Path) -> None:
    # nvcc drives cicc, ptxas, fatbinary and the host compiler: all of them must work in the jail
    # (the module's skip says it runs here), and the assembled .incbin in a .cu unit must find nothing.
    honest = asyncio.run(build_extension(CUDA_FILES, "cuda", cache_dir=cache))
    assert honest.ok, honest.log
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET_TOKEN_XYZ\n")
    unit = "kernels/diag_matmul.cu"
    source = ASSEMBLED_READS["incbin from stringised pieces"].format(secret=secret, folder=tmp_path) + CUDA_FILES[unit]
    result = asyncio.run(build_extension({**CUDA_FILES, unit: source}, "cuda", cache_dir=cache))
    assert not result.ok
    assert "SECRET_TOKEN_XYZ" not in result.log


def test_the_jail_can_be_turned_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_AGENT_COMPILER_JAIL", "0")
    assert jail_for("g++", ("/usr",)) is None
