"""One contract suite for every pool backend: local, socket client, Ray (marked `ray`)."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest
from conftest import make_job

from cuda_agent.errors import PoolError, PoolOverloadedError, PoolTimeoutError
from cuda_agent.sandbox_pool.harness import EvalJob, EvalResult, EvalStatus


def candidate_sha(job: EvalJob) -> str:
    return hashlib.sha256(json.dumps(job.files, sort_keys=True).encode()).hexdigest()


async def test_fast_kernel_is_ok_and_correct(make_pool) -> None:
    pool = await make_pool()
    job = make_job("cpu_fast")
    result = await pool.evaluate(job)
    assert result.status is EvalStatus.OK, result.error
    assert result.correct is True
    assert result.reward in (1.0, 2.0, 3.0)
    assert result.receipt.candidate_sha256 == candidate_sha(job)


async def test_the_window_check_reaches_the_workers(make_pool) -> None:
    """Issue 46: `window_check` of the pool's config reaches its workers' evaluators, every backend."""
    pool = await make_pool(window_check=True)
    results = [await pool.evaluate(make_job("cpu_fast", variant=i)) for i in range(2)]  # the second: baselines cached
    checked = results[-1]
    if checked.status is EvalStatus.INFRA_ERROR:  # this machine was busy: the check said so, not another reward
        assert checked.error.startswith("machine loaded"), checked.error
    else:
        assert checked.status is EvalStatus.OK, checked.error
        assert "eager_window_check" in checked.timings


async def test_cheat_is_a_violation(make_pool) -> None:
    pool = await make_pool()
    result = await pool.evaluate(make_job("cpu_cheat"))
    assert result.status is EvalStatus.VIOLATION
    assert result.reward == -1.0
    assert result.violations


async def test_concurrent_submissions_get_their_own_results(make_pool) -> None:
    pool = await make_pool(compile_workers=2)
    jobs = [make_job(name, variant=i, task_id=f"{name}-{i}")
            for i, name in enumerate(["cpu_fast", "cpu_cheat", "cpu_fast", "cpu_cheat"])]
    results = await asyncio.gather(*(pool.evaluate(job, priority=i % 2) for i, job in enumerate(jobs)))
    for job, result in zip(jobs, results):
        assert result.receipt.candidate_sha256 == candidate_sha(job), job.task_id
        expected = EvalStatus.OK if job.task_id.startswith("cpu_fast") else EvalStatus.VIOLATION
        assert result.status is expected, (job.task_id, result.error)
    assert len({r.receipt.candidate_sha256 for r in results}) == len(jobs)


async def test_full_queue_refuses_with_overloaded(make_pool) -> None:
    pool = await make_pool(max_pending_jobs=2)
    outcomes = await asyncio.gather(*(pool.evaluate(make_job("cpu_fast", variant=i)) for i in range(4)),
                                    return_exceptions=True)
    refused = [o for o in outcomes if isinstance(o, PoolOverloadedError)]
    served = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(refused) == 2 and len(served) == 2, outcomes
    assert all(r.status is EvalStatus.OK for r in served), [(r.status, r.error) for r in served]
    status = await pool.status()
    assert status.rejected == 2 and status.pending == 0


async def test_job_timeout_is_an_infra_failure_and_the_pool_recovers(make_pool) -> None:
    pool = await make_pool()
    with pytest.raises(PoolTimeoutError) as caught:
        await pool.evaluate(make_job("endless"), timeout_s=2.0)
    assert isinstance(caught.value, TimeoutError)
    assert "infrastructure-side" in str(caught.value)
    status = await pool.status()
    assert status.timed_out == 1 and status.failed == 1 and status.completed == 0
    # The worker that held the endless candidate is recycled; the next job is served normally.
    result = await pool.evaluate(make_job("cpu_fast"))
    assert result.status is EvalStatus.OK, result.error


async def test_status_reports_workers_queue_and_latency(make_pool) -> None:
    pool = await make_pool(recycle_after_jobs=1)
    before = await pool.status()
    assert before.device == "cpu" and len(before.workers) == 1 and before.queue_depth == 0
    await pool.evaluate(make_job("cpu_cheat"))
    status = await pool.status()
    assert status.submitted == 1 and status.completed == 1 and status.failed == 0
    assert status.latency.count == 1 and status.latency.p50_s > 0
    assert status.latency.p50_s <= status.latency.p90_s <= status.latency.p99_s
    worker = status.workers[0]
    assert worker.jobs_done == 1 and not worker.busy
    assert worker.recycles == 1, "recycle_after_jobs=1 replaces the evaluator after each job"
    assert 0.0 < worker.busy_s <= status.latency.p50_s + 1.0
    assert 0.0 < worker.busy_fraction <= 1.0
    assert status.pending == status.running == status.compiling == 0


async def test_job_for_another_device_is_refused(make_pool) -> None:
    pool = await make_pool()
    job = make_job("cpu_fast").model_copy(update={"device": "cuda"})
    with pytest.raises(PoolError):
        await pool.evaluate(job)


@pytest.mark.ray
async def test_named_ray_pool_is_reachable_from_another_ray_worker(ray_cluster, pool_cache) -> None:
    """A Ray task (as veRL's reward workers are) finds the pool by the address in CUDA_AGENT_POOL."""
    import ray

    from cuda_agent.sandbox_pool.pool import RayPool, RayPoolConfig

    @ray.remote(num_cpus=0)
    def remote_evaluate(job_json: str) -> str:
        from cuda_agent.sandbox_pool.pool import connect_pool

        async def run() -> str:
            async with connect_pool() as pool:
                return (await pool.evaluate(EvalJob.model_validate_json(job_json))).model_dump_json()

        return asyncio.run(run())

    config = RayPoolConfig(name="test-pool-named", num_workers=1, num_gpus_per_worker=1, cache_dir=pool_cache)
    async with RayPool(config) as pool:
        env = {"env_vars": {"CUDA_AGENT_POOL": pool.ray_address}}
        job = make_job("cpu_cheat")
        answer = await remote_evaluate.options(runtime_env=env).remote(job.model_dump_json())
        result = EvalResult.model_validate_json(answer)
        assert result.status is EvalStatus.VIOLATION
        assert result.receipt.candidate_sha256 == candidate_sha(job)
        assert (await pool.status()).completed == 1
