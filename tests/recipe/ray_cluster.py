"""A local Ray cluster with TransferQueue, as veRL's v1 trainer runs its agent-loop workers."""

from __future__ import annotations

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
