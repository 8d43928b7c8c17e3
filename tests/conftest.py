"""Shared fixtures. GPU tests are skipped without a GPU; docker tests without an engine."""

from __future__ import annotations

import pytest


def _has_cuda() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if _has_cuda():
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run scripts/gpu-tests.sh on a GPU node)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    """A test that sets torch's thread count must not change it for the tests after it: the
    evaluator's parent and its children then reduce in different orders (an order-dependent
    failure of the full suite came from exactly that)."""
    try:
        import torch
    except ImportError:
        yield
        return
    threads = torch.get_num_threads()
    yield
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
