"""A local Ray cluster with TransferQueue, as veRL's v1 trainer runs its agent-loop workers."""

from __future__ import annotations

import asyncio
import contextlib

import pytest


@contextlib.contextmanager
def ray_with_transfer_queue(num_cpus: int):
    """A local Ray cluster with TransferQueue's controller and storage (each reserves a logical CPU)."""
    import os

    os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")
    ray = pytest.importorskip("ray")
    tq = pytest.importorskip("transfer_queue")
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False)
    try:
        tq.init()
        yield tq
    finally:
        tq.close()
        ray.shutdown()


async def drive_v1_worker(tq, worker, batch) -> tuple[list[str], dict, list[str]]:
    """Run ``AgentLoopWorkerTQ.generate_sequences`` as the v1 trainer does (prompts tagged pending in
    TransferQueue, the worker's background tasks awaited); (prompt uids, the partition's listing, output keys
    in prompt order). Outputs are keyed ``{uid}_{session}_{index}``; the partition also holds earlier tests'."""
    from cuda_agent.reward_fns.evaluation import aclose_embedded

    uids = list(batch["uid"])
    tq.kv_batch_put(keys=uids, partition_id="train",
                    tags=[{"is_prompt": True, "status": "pending", "global_steps": 1} for _ in uids])
    try:
        await worker.generate_sequences(batch)
        await asyncio.wait_for(asyncio.gather(*list(worker.background_tasks)), timeout=600)
    finally:
        await aclose_embedded()
    listed = tq.kv_list("train")["train"]
    outputs = [key for key in listed if key not in uids and key.rsplit("_", 2)[0] in uids]
    return uids, listed, sorted(outputs, key=lambda key: uids.index(key.rsplit("_", 2)[0]))
