"""Pool pieces that need no evaluator: queue order, admission, metrics, addresses, wire errors."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
from conftest import make_job
from pydantic import TypeAdapter, ValidationError

from cuda_agent import errors
from cuda_agent.sandbox_pool.pool import (
    LocalPool,
    LocalPoolConfig,
    PoolClient,
    PoolConfig,
    RayPoolConfig,
    connect_pool,
)
from cuda_agent.sandbox_pool.pool.metrics import LatencyWindow, percentile
from cuda_agent.sandbox_pool.pool.protocol import error_response, handle_request, raise_wire_error
from cuda_agent.sandbox_pool.pool.tickets import JobBook, TicketQueue


async def test_queue_serves_highest_priority_then_oldest() -> None:
    book = JobBook(max_pending=10, default_timeout_s=60, latency_window=16)
    tickets = [book.admit(make_job("cpu_fast", task_id=f"t{i}"), priority, None)
               for i, priority in enumerate([0, 5, 0, 5, 1])]
    order = [(await book.queue.get()).job.task_id for _ in tickets]
    assert order == ["t1", "t3", "t4", "t0", "t2"]


async def test_withdrawn_tickets_are_skipped() -> None:
    queue, book = TicketQueue(), JobBook(10, 60, 16)
    first, second = (book.admit(make_job("cpu_fast", task_id=t), 0, None) for t in ("a", "b"))
    queue.put(first)
    queue.put(second)
    book.withdraw(first)
    assert (await queue.get()) is second
    assert first.future.cancelled() and len(book.pending) == 1


async def test_admission_refuses_beyond_the_limit_without_waiting() -> None:
    book = JobBook(max_pending=2, default_timeout_s=60, latency_window=16)
    book.admit(make_job("cpu_fast"), 0, None)
    book.admit(make_job("cpu_fast"), 0, None)
    with pytest.raises(errors.PoolOverloadedError):
        book.admit(make_job("cpu_fast"), 0, None)
    assert book.counts["rejected"] == 1 and book.stages()["queue_depth"] == 2


async def test_deadline_raises_pool_timeout_and_withdraws() -> None:
    book = JobBook(max_pending=2, default_timeout_s=60, latency_window=16)
    ticket = book.admit(make_job("cpu_fast"), 0, 0.05)
    with pytest.raises(errors.PoolTimeoutError):
        await book.wait(ticket)
    assert ticket.abandoned and not book.pending and book.counts["timed_out"] == 1


def test_latency_percentiles() -> None:
    window = LatencyWindow(100)
    assert window.stats().count == 0 and window.stats().p50_s is None
    for value in range(1, 101):
        window.add(float(value))
    stats = window.stats()
    assert (stats.p50_s, stats.p90_s, stats.p99_s) == (50.0, 90.0, 99.0)
    assert percentile([3.0], 99) == 3.0


def test_config_is_picked_by_type() -> None:
    adapter = TypeAdapter(PoolConfig)
    assert isinstance(adapter.validate_python({"type": "local", "devices": [0, 1]}), LocalPoolConfig)
    assert isinstance(adapter.validate_python({"type": "ray", "num_workers": 8}), RayPoolConfig)
    with pytest.raises(ValidationError):
        adapter.validate_python({"type": "local", "queue": 3})
    with pytest.raises(ValidationError):
        LocalPoolConfig(devices=[0, 0])
    assert LocalPoolConfig(cpu_workers=3).worker_devices() == [0, 1, 2]


def test_address_resolution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_AGENT_POOL", raising=False)
    assert isinstance(connect_pool(), LocalPool)
    monkeypatch.setenv("CUDA_AGENT_POOL", "/run/pool.sock")
    client = connect_pool()
    assert isinstance(client, PoolClient) and str(client.path) == "/run/pool.sock"
    assert str(connect_pool("unix:///tmp/x.sock").path) == "/tmp/x.sock"  # type: ignore[attr-defined]
    ray_client = connect_pool("ray://my_pool?namespace=prod")
    assert (ray_client.name, ray_client.namespace) == ("my_pool", "prod")  # type: ignore[attr-defined]
    with pytest.raises(errors.ConfigError):
        connect_pool("http://host:80")


async def test_unreachable_socket(tmp_path) -> None:
    with pytest.raises(errors.PoolUnreachableError) as caught:
        await PoolClient(str(tmp_path / "none.sock")).status()
    assert isinstance(caught.value, ConnectionError)


@pytest.mark.parametrize("exc", [errors.PoolOverloadedError("full"), errors.PoolTimeoutError("late"),
                                 errors.InfraError("broken")])
def test_errors_keep_their_class_over_the_wire(exc: Exception) -> None:
    response = error_response(exc)
    with pytest.raises(type(exc), match=str(exc)):
        raise_wire_error(response.error)


async def test_malformed_request_is_answered_not_raised() -> None:
    response = await handle_request(LocalPool(), b'{"op": "nope"}')
    assert not response.ok and response.error.type == "ConfigError"


def test_cli_module_is_light() -> None:
    code = ("import sys, cuda_agent.sandbox_pool.pool.cli, cuda_agent.sandbox_pool.pool as p; "
            "assert 'torch' not in sys.modules and 'ray' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


async def test_pool_close_fails_pending_jobs() -> None:
    book = JobBook(max_pending=4, default_timeout_s=60, latency_window=16)
    ticket = book.admit(make_job("cpu_fast"), 0, None)
    waiter = asyncio.create_task(book.wait(ticket))
    await asyncio.sleep(0)
    book.close()
    with pytest.raises(errors.PoolError):
        await waiter


async def test_worker_is_recycled_after_an_unclean_job_and_after_its_quota(pool_cache) -> None:
    from cuda_agent.sandbox_pool.harness import EvaluatorConfig
    from cuda_agent.sandbox_pool.pool.worker import EvalWorker

    worker = EvalWorker("cpu:0", EvaluatorConfig(device="cpu", cache_dir=pool_cache), recycle_after_jobs=2)
    await worker.start()
    first = worker.evaluator
    await worker.after_job(healthy=False)  # an infra_error / withdrawn job: replace the evaluator
    assert worker.recycles == 1 and worker.evaluator is not first
    await worker.after_job(healthy=True)
    assert worker.recycles == 1
    await worker.after_job(healthy=True)  # quota of 2 clean jobs reached
    assert worker.recycles == 2 and worker.jobs_done == 3
    await worker.close()


@pytest.mark.ray
async def test_unreachable_ray_pool() -> None:
    with pytest.raises(errors.PoolUnreachableError):
        await connect_pool("ray://no_such_pool").status()
