"""The parent's judging when the device has no memory left (session.judge).

A candidate's child may hold nearly all of the GPU's memory while it waits for its verdict; an error in
the parent's judging would be an infrastructure failure (no reward: the sample left out of training),
so the judging goes on on the CPU. The GPU test with a candidate that fills the device is in
test_gpu.py; here the rule itself, on any machine."""

from __future__ import annotations

import pytest
import torch

from cuda_agent.sandbox_pool.harness.session import judge, on_device


def _needs_cpu(message: str):
    """A judging step that runs out of memory anywhere but on the CPU."""
    calls: list[str] = []

    def step(device: str, x: torch.Tensor) -> float:
        calls.append(device)
        if device != "cpu":
            raise torch.OutOfMemoryError(message) if "CUDA out of memory" in message else RuntimeError(message)
        return float(x.to(device).sum())

    return step, calls


@pytest.mark.parametrize("message", ["CUDA out of memory. Tried to allocate 2.00 GiB",
                                     "CUDA error: out of memory"])
def test_out_of_memory_is_judged_on_the_cpu(message: str) -> None:
    step, calls = _needs_cpu(message)
    value, on_cpu = judge("meta", step, torch.ones(3))
    assert (value, on_cpu, calls) == (3.0, True, ["meta", "cpu"])


def test_other_errors_are_not_hidden() -> None:
    step, calls = _needs_cpu("CUDA error: an illegal memory access was encountered")
    with pytest.raises(RuntimeError, match="illegal memory access"):
        judge("meta", step, torch.ones(3))
    assert calls == ["meta"]


def test_the_device_is_used_when_it_can_be() -> None:
    step, calls = _needs_cpu("unused")
    assert judge("cpu", step, torch.ones(2)) == (2.0, False)
    assert calls == ["cpu"]


def test_on_device_moves_tensors_and_keeps_the_rest() -> None:
    tensor = torch.ones(2)
    moved = on_device([tensor, 1.5, None], "cpu")
    assert moved[0] is tensor and moved[1:] == [1.5, None]
    assert on_device([tensor], "meta")[0].device.type == "meta"
