"""The fast glue: binding units built against the light headers behave like pybind11 ones,
and units the glue cannot build fall back to the real headers."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from cuda_agent.sandbox_pool.harness.compiler import glue
from cuda_agent.sandbox_pool.harness.compiler.builder import build_extension

BINDING = r'''
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include <tuple>
#include <vector>
#include "../binding_registry.h"

static torch::Tensor scale(const torch::Tensor& x, double factor, bool negate) {
  auto out = torch::empty_like(x);
  const float* src = x.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) dst[i] = (negate ? -1.0f : 1.0f) * factor * src[i];
  return out;
}
static int64_t total(std::vector<int64_t> xs) { int64_t s = 0; for (auto x : xs) s += x; return s; }
static int64_t total(int64_t a, int64_t b) { return a + b; }
static std::tuple<torch::Tensor, int64_t> pair(torch::Tensor x, std::optional<torch::Tensor> y) {
  return {torch::zeros({2, 3}, x.options()), y.has_value() ? 1 : 0};
}
static void check_positive(torch::Tensor x) { TORCH_CHECK(x.numel() > 0, "need a non-empty tensor"); }

static void register_all(pybind11::module& m) {
  m.def("scale", &scale, "Scales x.", py::arg("x"), py::arg("factor") = 2.0, py::arg("negate") = false);
  m.def("total", static_cast<int64_t (*)(std::vector<int64_t>)>(&total));
  m.def("total", static_cast<int64_t (*)(int64_t, int64_t)>(&total));
  m.def("pair", &pair);
  m.def("check_positive", &check_positive);
  m.def("lambda_add", [](int64_t a, int64_t b) { return a + b; });
}
REGISTER_BINDING(all, register_all);
'''

NEEDS_REAL_PYBIND = r'''
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include "../binding_registry.h"

static int64_t length(pybind11::object obj) { return pybind11::len(obj); }
static void register_len(pybind11::module& m) { m.def("length", &length); }
REGISTER_BINDING(len, register_len);
'''


def _run_with(so_path: str, body: str) -> None:
    """Run `body` with the module loaded as `ext` in a fresh interpreter (one extension per process,
    as in an evaluation child: its registries are process-wide)."""
    script = textwrap.dedent(f"""
        import importlib.util, pytest, torch
        spec = importlib.util.spec_from_file_location("cuda_extension", {so_path!r})
        ext = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(ext)
    """) + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fast_glue_cache")


def _build(source: str, cache: Path):
    result = asyncio.run(build_extension({"kernels/k_binding.cpp": source}, "cpu", cache_dir=cache))
    assert result.ok, result.log
    return result


def _markers(cache: Path) -> list[Path]:
    return list(cache.rglob("*.real"))


def test_eligibility() -> None:
    assert glue.eligible("kernels/a_binding.cpp", BINDING)
    assert not glue.eligible("binding.cpp", BINDING)  # the fixed unit
    assert not glue.eligible("kernels/a.cu", BINDING)
    assert not glue.eligible("kernels/a_binding.cpp", "#include <torch/extension.h>\n")
    assert not glue.eligible("kernels/a_binding.cpp", BINDING + "#include <pybind11/stl.h>\n")


def test_fast_glue_calls_like_pybind11(cache: Path) -> None:
    result = _build(BINDING, cache)
    assert not _markers(cache), "the unit should have been built with the fast glue"
    _run_with(result.so_path, """
        x = torch.arange(4, dtype=torch.float32)
        assert torch.equal(ext.scale(x), x * 2)
        assert torch.equal(ext.scale(x, 3.0, True), x * -3)
        assert torch.equal(ext.scale(x, negate=True), x * -2)
        assert torch.equal(ext.scale(x=x, factor=1), x)  # an int where a float is expected, like pybind11
        assert ext.total([1, 2, 3]) == 6 and ext.total((4, 5)) == 9 and ext.total(1, 2) == 3  # overloads
        z, flag = ext.pair(x, None)
        assert z.shape == (2, 3) and flag == 0 and ext.pair(x, x)[1] == 1
        assert ext.lambda_add(2, 3) == 5
        assert ext.check_positive(x) is None
        assert "Scales x." in ext.scale.__doc__
        with pytest.raises(TypeError):
            ext.scale("not a tensor")
        with pytest.raises(TypeError):
            ext.total(1.5, 2)  # a float where an int is expected: refused, like pybind11
        with pytest.raises(TypeError):
            ext.scale(x, bogus=1)
        with pytest.raises(RuntimeError, match="need a non-empty tensor"):
            ext.check_positive(torch.empty(0))
    """)


def test_units_the_glue_cannot_build_use_the_real_headers(cache: Path) -> None:
    before = len(_markers(cache))
    result = _build(NEEDS_REAL_PYBIND, cache)
    assert len(_markers(cache)) == before + 1, "the fast attempt should have failed and been remembered"
    _run_with(result.so_path, "assert ext.length([1, 2, 3]) == 3")
    again = _build(NEEDS_REAL_PYBIND, cache)
    assert again.cached and again.units_compiled == 0


def test_concurrent_builds_of_one_precompiled_header(tmp_path: Path) -> None:
    # Two compile slots of one pool often need the same (new) header at once; filelock used to
    # refuse the second as a deadlock when the worker thread that held the first was reused.
    from cuda_agent.sandbox_pool.harness.compiler.pch import ensure_pch

    async def build_all():
        return await asyncio.gather(*(
            ensure_pch(tmp_path, "g++", ["-std=c++17"], "cpu", 60, text="#pragma once\n#include <vector>\n")
            for _ in range(4)))

    headers = asyncio.run(build_all())
    assert len(set(headers)) == 1 and headers[0] is not None
    assert Path(str(headers[0]) + ".gch").exists()


def _fake_compiler(tmp_path: Path, seconds: float) -> str:
    """A 'compiler' that takes `seconds` and writes its -o file: the lock's behaviour without g++'s time."""
    script = tmp_path / "fake_cxx"
    script.write_text(f'#!/bin/sh\nsleep {seconds}\nwhile [ "$1" != "-o" ]; do shift; done\necho pch > "$2"\n')
    script.chmod(0o755)
    return str(script)


def test_the_header_lock_is_taken_again_and_again_from_reused_worker_threads(tmp_path: Path) -> None:
    """The lock is taken in a worker thread and released on the event loop's: taken again from the same (reused)
    worker thread, round after round, it must not look held (the GPU node's filelock refused exactly that as a
    deadlock: the pool's compile requests failed in the pipeline's demonstrations, 2026-12-07)."""
    from cuda_agent.sandbox_pool.harness.compiler.pch import PCH_NAME, ensure_pch

    cxx = _fake_compiler(tmp_path, 0.05)

    async def rounds() -> list[Path | None]:
        found = []
        for _ in range(5):
            for gch in (tmp_path / "cache").glob(f"pch/*/{PCH_NAME}.gch"):
                gch.unlink()  # build it again: every call takes the lock
            found += await asyncio.gather(*(ensure_pch(tmp_path / "cache", cxx, [], "cpu", 10, text="x")
                                            for _ in range(3)))
        return found

    headers = asyncio.run(rounds())
    assert None not in headers and len(set(headers)) == 1


@pytest.mark.timeout(60)  # before the fix the thread kept the lock: the next build, and the loop's shutdown, hung
def test_a_build_cancelled_while_it_waits_for_the_lock_leaves_it_free(tmp_path: Path) -> None:
    from cuda_agent.sandbox_pool.harness.compiler.pch import ensure_pch

    cxx = _fake_compiler(tmp_path, 0.5)

    async def scenario() -> Path | None:
        first = asyncio.create_task(ensure_pch(tmp_path / "cache", cxx, [], "cpu", 10, text="x"))
        await asyncio.sleep(0.1)
        waiting = asyncio.create_task(ensure_pch(tmp_path / "cache", cxx, ["-O2"], "cpu", 10, text="x"))
        other = asyncio.create_task(ensure_pch(tmp_path / "cache", cxx, [], "cpu", 10, text="x"))
        await asyncio.sleep(0.1)
        other.cancel()  # waiting behind `first` for the same folder's lock
        await first
        with contextlib.suppress(asyncio.CancelledError):
            await other
        await waiting
        for gch in (tmp_path / "cache").glob("pch/*/*.gch"):
            gch.unlink()
        return await asyncio.wait_for(ensure_pch(tmp_path / "cache", cxx, [], "cpu", 10, text="x"), 5)

    assert asyncio.run(scenario()) is not None
