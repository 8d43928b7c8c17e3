"""CUDA versions of the harness checks (run on a GPU node by scripts/gpu-tests.sh)."""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path

import pytest
import torch

from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, EvalStatus, Evaluator, EvaluatorConfig
from cuda_agent.sandbox_pool.workspace import read_candidate_files

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[3]
PROBLEM = (ROOT / "examples/problems/diag_matmul_cuda.py").read_text()
SOLUTIONS = ROOT / "examples/solutions/diag_matmul"


def _files(name: str) -> dict[str, str]:
    return read_candidate_files(SOLUTIONS / name)


@pytest.fixture(scope="module")
def run():
    loop = asyncio.new_event_loop()
    evaluator = Evaluator(EvaluatorConfig(device="cuda"))
    loop.run_until_complete(evaluator.start())

    def evaluate(files: dict[str, str], **opts):
        options = EvalOptions(seed=opts.pop("seed", 11), **opts)
        return loop.run_until_complete(evaluator.evaluate(EvalJob(problem_src=PROBLEM, files=files, device="cuda",
                                                                  options=options)))

    yield evaluate
    loop.run_until_complete(evaluator.close())
    loop.close()


def test_fast_kernel_beats_both_baselines(run) -> None:
    result = run(_files("cuda_fast"))
    print("cuda_fast:", result.to_public_json(), result.receipt.isolation)
    assert result.status is EvalStatus.OK, result.error
    assert result.reward == 3.0
    # Trial outputs crossed through the sealed shared region, pinned for DMA (output_buffer.py).
    assert "through the shared region (pinned), 0 through files" in result.stages["verify"].log, \
        result.stages["verify"].log


def test_slow_kernel_is_correct_but_not_rewarded_for_speed(run) -> None:
    result = run(_files("cuda_slow"))
    print("cuda_slow:", result.to_public_json())
    assert result.correct and result.reward == 1.0


def test_torch_fallback_is_rejected(run) -> None:
    result = run(_files("cuda_cheat"))
    assert result.status is EvalStatus.VIOLATION and result.reward == -1.0


MACRO_KERNEL = """
#include <cuda_runtime.h>
#include <torch/types.h>
#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
%(extra)s
#define CUDA_CHECK(call) do { cudaError_t err_ = (call); TORCH_CHECK(err_ == cudaSuccess, "CUDA: ", cudaGetErrorString(err_)); } while (0)
#define CHECK_INPUT(x) TORCH_CHECK((x).is_cuda() && (x).is_contiguous(), #x " must be a contiguous CUDA tensor")
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

template <typename scalar_t>
__global__ void row_scale(const scalar_t* __restrict__ a, const scalar_t* __restrict__ b, scalar_t* __restrict__ out,
                          long n, long m) {
  long idx = blockIdx.x * (long)blockDim.x + threadIdx.x;
  if (idx < n * m) out[idx] = a[idx / m] * b[idx];
}

torch::Tensor diag_matmul_cuda(torch::Tensor a, torch::Tensor b) {
  CHECK_INPUT(a);
  CHECK_INPUT(b);
  auto out = torch::empty_like(b);
  const long n = b.size(0), m = b.size(1);
  const int threads = 256;
  AT_DISPATCH_FLOATING_TYPES(b.scalar_type(), "row_scale", [&] {
    row_scale<scalar_t><<<CEIL_DIV(n * m, threads), threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        a.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), n, m);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  CUDA_CHECK(cudaGetLastError());
  return out;
}
"""

MACRO_BINDING = """
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include "../binding_registry.h"
torch::Tensor diag_matmul_cuda(torch::Tensor a, torch::Tensor b);
static void register_diag_matmul(pybind11::module& m) { m.def("diag_matmul", &diag_matmul_cuda); }
REGISTER_BINDING(diag_matmul, register_diag_matmul);
"""

# Host code of a .cu that reaches a Python object through a name only a macro spells (nvcc's host pass).
MACRO_HIDDEN_ATTR = """#include <torch/csrc/utils/pybind.h>
#define REACH attr
void poke(pybind11::handle h) { (void)h.REACH("__dict__"); }
"""


@pytest.mark.parametrize("hidden", [False, True], ids=["torch_and_own_macros", "macro_hides_attr"])
def test_cuda_sources_are_checked_as_the_compiler_reads_them(run, hidden: bool) -> None:
    """Real torch headers and nvcc's two passes: what library and candidate macros expand to in an honest
    .cu passes the build's expanded-source check; what a macro hides in the host code does not."""
    files = {"model_new.py": _files("cuda_fast")["model_new.py"],
             "kernels/diag_matmul.cu": MACRO_KERNEL % {"extra": MACRO_HIDDEN_ATTR if hidden else ""},
             "kernels/diag_matmul_binding.cpp": MACRO_BINDING}
    result = run(files, profile=False)
    if hidden:
        assert result.status is EvalStatus.VIOLATION and result.stages["static_check"].ok, result.error
        assert any("after macro expansion" in v for v in result.violations), result.violations
    else:
        assert result.status is EvalStatus.OK and result.correct, (result.status, result.error, result.violations)


# A torch fallback computed after the call, by a torch method the candidate replaced through a helper called with
# torch as its `self` (the static check refuses that since 2026-12-04: harness/self_binding.py; taken out of the way
# here); on Python 3.12 the child watches the candidate's code with sys.monitoring (turns.py).
FILLED_AFTER_THE_CALL = """
import torch
import torch.nn as nn
import cuda_extension

pending = []


class Patch:
    def detach(self, hook):
        self.detach = hook


original_detach = torch.Tensor.detach


def detach_after_filling(t):
    while pending:
        out, a, b = pending.pop()
        out.copy_(a.unsqueeze(1) * b)
    return original_detach(t)


Patch.detach(torch.Tensor, detach_after_filling)


class ModelNew(nn.Module):
    def forward(self, A, B):
        out = torch.empty_like(B)
        pending.append((out, A, B))
        return out
"""


def test_a_torch_fallback_left_for_the_harness_to_run_is_a_violation(run, static_check_off) -> None:
    files = {**_files("cuda_fast"), "model_new.py": FILLED_AFTER_THE_CALL}
    result = run(files, profile=True)
    assert result.status is EvalStatus.VIOLATION and result.reward == -1.0, (result.status, result.error)
    assert any("ran outside the candidate's import" in v for v in result.violations), result.violations


def test_illegal_memory_access_is_a_crash_and_the_worker_survives(run) -> None:
    files = _files("cuda_fast")
    files["kernels/diag_matmul.cu"] = files["kernels/diag_matmul.cu"].replace(
        "out[idx] = make_float4", "out[idx - (1L << 40)] = make_float4")
    bad = run(files, profile=False)
    assert bad.status is EvalStatus.CRASH and bad.reward == -1.0, bad.error
    good = run(_files("cuda_fast"), profile=False)
    assert good.correct


def test_silent_launch_failure_is_incorrect(run) -> None:
    files = _files("cuda_fast")
    files["kernels/diag_matmul.cu"] = files["kernels/diag_matmul.cu"].replace("const int threads = 256;",
                                                                             "const int threads = 4096;")
    result = run(files, profile=False)
    assert result.reward == -1.0 and result.status in (EvalStatus.INCORRECT, EvalStatus.CRASH), result.error


HOLD_THE_DEVICE = r"""
// Fills the device's memory, all but ~64 MB (this process's own next steps), and keeps it.
static void hold_the_device() {
  static bool held = false;
  if (held) return;
  held = true;
  size_t free_b = 0, total_b = 0;
  for (size_t chunk = 1ull << 30; chunk >= (1ull << 20); chunk /= 2) {
    void* p = nullptr;
    while (cudaMemGetInfo(&free_b, &total_b) == cudaSuccess && free_b > chunk + (64ull << 20) &&
           cudaMalloc(&p, chunk) == cudaSuccess) {
    }
  }
  cudaGetLastError();
}
"""


def holding_the_device(wrong: bool) -> dict[str, str]:
    """cuda_fast, filling the device's memory at its first call; `wrong`: every fourth output off by 1."""
    files = _files("cuda_fast")
    unit = files["kernels/diag_matmul.cu"].replace("#include <cuda_runtime.h>\n",
                                                   "#include <cuda_runtime.h>\n" + HOLD_THE_DEVICE, 1)
    unit = unit.replace("const int threads = 256;", "hold_the_device();\n  const int threads = 256;")
    if wrong:
        unit = unit.replace("s * v.w)", "s * v.w + 1.0f)")
    files["kernels/diag_matmul.cu"] = unit
    return files


@pytest.mark.parametrize("wrong", [True, False], ids=["wrong", "right"])
def test_a_candidate_holding_the_device_memory_still_gets_its_verdict(run, wrong: bool) -> None:
    """Its outputs are judged on the CPU (session.judge): no out-of-memory infrastructure failure, which
    would leave a wrong kernel without its -1."""
    torch.cuda.empty_cache()  # what earlier tests left in this process's allocator could serve the judging
    result = run(holding_the_device(wrong), profile=False)
    log = result.stages["verify"].log if "verify" in result.stages else ""
    print("holding the device,", "wrong:" if wrong else "right:", result.status.value, result.error, "|", log)
    if wrong:
        assert result.status is EvalStatus.INCORRECT and result.reward == -1.0, result.error
    else:
        assert result.status is EvalStatus.OK and result.correct, result.error
    assert "ran on the CPU: the device had no memory left" in log


def test_two_profiles_agree(run) -> None:
    a = run(_files("cuda_fast"), seed=1)
    b = run(_files("cuda_fast"), seed=2)
    spread = abs(a.runtime_us - b.runtime_us) / min(a.runtime_us, b.runtime_us)
    print(f"profile agreement: {a.runtime_us:.2f} us vs {b.runtime_us:.2f} us ({spread * 100:.2f}%)")
    for r in (a, b):
        t = r.timings["candidate"]
        print("  samples:", " ".join(f"{s:.1f}" for s in t.samples_us), "|", r.stages["profile"].log)
    # The 1% is a benchmark figure (benchmarks/harness/RESULTS.md: the repeat spread). A test cannot hold
    # two medians of 30 calls to it: on the H200 the calls fall in two clock modes ~2% apart (67.x and 69.x us)
    # and a median lands in either (1.04% and 1.50% on 2026-12-04). 3%, or three standard errors of the
    # medians' difference when larger, still catches a broken timer or a cache effect.
    assert spread < max(0.03, 3 * _median_difference_se(a, b) / min(a.runtime_us, b.runtime_us))


def _median_difference_se(a, b) -> float:
    """Standard error of the difference of two runs' median times (1.2533 sigma / sqrt(n) each)."""
    ses = [1.2533 * statistics.stdev(s) / len(s) ** 0.5 for s in (r.timings["candidate"].samples_us for r in (a, b))]
    return (ses[0] ** 2 + ses[1] ** 2) ** 0.5


CUDA_CANDIDATES = Path(__file__).parent / "candidates" / "cuda"


def _gemm_job_files(tf32: bool) -> dict[str, str]:
    binding = (CUDA_CANDIDATES / "gemm_binding.cpp").read_text()
    if tf32:
        binding = "#define CUDA_AGENT_TEST_TF32 1\n" + binding
    return {"model_new.py": (CUDA_CANDIDATES / "model_new_gemm.py").read_text(), "kernels/gemm_binding.cpp": binding}


@pytest.mark.parametrize("tf32", [False, True], ids=["cublas_fp32", "cublas_tf32"])
def test_cublas_calling_candidates_are_legitimate(tf32: bool) -> None:
    problem = (CUDA_CANDIDATES / "problem_matmul.py").read_text()
    job = EvalJob(problem_src=problem, files=_gemm_job_files(tf32), device="cuda", options=EvalOptions(seed=5))
    result = asyncio.run(_evaluate_once(job))
    print("cublas", "tf32" if tf32 else "fp32", result.to_public_json())
    assert result.status is EvalStatus.OK, result.error
    assert result.reward >= 1.0


async def _evaluate_once(job: EvalJob):
    async with Evaluator(EvaluatorConfig(device="cuda")) as evaluator:
        return await evaluator.evaluate(job)
