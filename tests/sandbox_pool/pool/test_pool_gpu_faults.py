"""Faults contained on a GPU node (issue 3): bad candidates in the same pool as good ones.

Every fault gets a clear verdict, the good evaluations submitted at the same time return
their correct results (no loss, no mix-up), and the pool keeps serving afterwards.
Run by scripts/gpu-session.sh on the H200 machine.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import tempfile
from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.harness import EvalJob, EvalOptions, EvalStatus
from cuda_agent.sandbox_pool.pool import LocalPool, LocalPoolConfig
from cuda_agent.sandbox_pool.workspace import read_candidate_files

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[3]
PROBLEM = (ROOT / "examples/problems/diag_matmul_cuda.py").read_text()
FAST = read_candidate_files(ROOT / "examples/solutions/diag_matmul/cuda_fast")
KERNEL = "kernels/diag_matmul.cu"
BINDING = "kernels/diag_matmul_binding.cpp"


def _variant(tag: str, **replace: tuple[str, str]) -> dict[str, str]:
    files = dict(FAST)
    files["model_new.py"] += f"\n# {tag}\n"
    for path, (old, new) in replace.items():
        key = {"kernel": KERNEL, "binding": BINDING}[path]
        assert old in files[key], (tag, old)
        files[key] = files[key].replace(old, new)
    return files


FAULTS: dict[str, tuple[dict[str, str], set[EvalStatus]]] = {
    "segfault": (_variant("segfault", binding=("auto out = torch::empty_like(b);",
                                               "*(volatile int*)nullptr = 1; auto out = torch::empty_like(b);")),
                 {EvalStatus.CRASH}),
    "illegal_memory_access": (_variant("illegal", kernel=("out[idx] = make_float4", "out[idx - (1L << 40)] = make_float4")),
                              {EvalStatus.CRASH}),
    "endless_kernel": (_variant("endless", kernel=("float s = a[idx / m4];",
                                                   "while (a[0] == a[0]) { __nanosleep(1000); } float s = a[idx / m4];")),
                       {EvalStatus.TIMEOUT}),
    "endless_compile": (_variant("compile", kernel=(
        "#include <cuda_runtime.h>",
        "#include <cuda_runtime.h>\ntemplate <int N, int K> struct Blow { static constexpr long v = "
        "Blow<N - 1, 2 * K>::v + Blow<N - 1, 2 * K + 1>::v; };\n"
        "template <int K> struct Blow<0, K> { static constexpr long v = 1; };\n"
        "static_assert(Blow<40, 0>::v > 0, \"\");")),
        {EvalStatus.COMPILE_ERROR}),
    "gpu_memory_hog": (_variant("hog", binding=("auto out = torch::empty_like(b);",
                                                "auto hog = torch::empty({1L << 42}, b.options()); auto out = torch::empty_like(b);")),
                       {EvalStatus.CRASH}),
    "file_writer": (_variant("writer", binding=("auto out = torch::empty_like(b);",
                                                "FILE* f = fopen(\"/tmp/x\", \"w\"); auto out = torch::empty_like(b);")),
                    {EvalStatus.VIOLATION, EvalStatus.STATIC_CHECK_FAILED}),
    "loopback_connection": (_variant("socket", binding=("auto out = torch::empty_like(b);",
                                                        "int s = socket(2, 1, 0); auto out = torch::empty_like(b);")),
                            {EvalStatus.VIOLATION, EvalStatus.STATIC_CHECK_FAILED, EvalStatus.COMPILE_ERROR}),
}


def _sha(files: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def _job(files: dict[str, str], task_id: str) -> EvalJob:
    return EvalJob(problem_src=PROBLEM, files=files, device="cuda", task_id=task_id,
                   options=EvalOptions(timed_calls=10, run_timeout_s=25, compile_timeout_s=20))


@pytest.mark.parametrize("devices", [[0], [0, 1]], ids=["one_gpu", "two_gpus_own_processes"])
def test_faults_are_contained_while_good_jobs_run(devices: list[int]) -> None:
    import torch

    if torch.cuda.device_count() < len(devices):
        pytest.skip(f"needs {len(devices)} GPUs")
    asyncio.run(_faults_are_contained_while_good_jobs_run(devices))  # no pytest-asyncio on the GPU machine


async def _faults_are_contained_while_good_jobs_run(devices: list[int]) -> None:
    with tempfile.TemporaryDirectory(prefix="gpu_faults_") as cache:
        config = LocalPoolConfig(device="cuda", devices=devices, compile_workers=4, cache_dir=Path(cache),
                                 job_timeout_s=180)
        assert config.uses_worker_processes() == (len(devices) > 1)
        async with LocalPool(config) as pool:
            await pool.evaluate(_job(_variant("warm-up"), "warm-up"))  # baselines and headers, once
            good = [_job(_variant(f"good-{i}"), f"good-{i}") for i in range(4)]
            bad = [_job(files, name) for name, (files, _) in FAULTS.items()]
            jobs = [j for pair in zip(good, bad) for j in pair] + bad[len(good):]
            results = await asyncio.gather(*(pool.evaluate(j) for j in jobs))
            for job, result in zip(jobs, results):
                print(f"{job.task_id}: {result.status.value} reward={result.reward} {(result.error or '')[:160]}")
                assert result.receipt.candidate_sha256 == _sha(job.files), job.task_id
                if job.task_id.startswith("good"):
                    assert result.status is EvalStatus.OK and result.reward == 3.0, (job.task_id, result.error)
                else:
                    expected = FAULTS[job.task_id][1]
                    assert result.status in expected and result.reward == -1.0, (job.task_id, result.status, result.error)
                    assert result.error, job.task_id
            after = await pool.evaluate(_job(_variant("after"), "after"))
            assert after.status is EvalStatus.OK and after.reward == 3.0, after.error
            status = await pool.status()
            print("pool status:", status.model_dump_json())
            assert status.failed == 0 and status.completed == len(jobs) + 2
            assert all(w.jobs_done > 0 for w in status.workers), "every GPU served jobs"
