"""The trusted worker's device memory (issue 36): parent-side steps on pooled streams keep its cache bounded.

Run on a GPU node (`PHASES=tests bash scripts/gpu-session.sh`)."""

from __future__ import annotations

import pytest
import torch

from cuda_agent.sandbox_pool.harness.reference import own_stream

pytestmark = pytest.mark.gpu

MIB = 1 << 20
SIZE = 256 * MIB


def _step(device: str) -> torch.Tensor:
    """A parent-side step: a large temporary, freed before the step ends, and a small result."""
    big = torch.empty(SIZE // 4, dtype=torch.float32, device=device).fill_(1.0)
    return big[:16].clone()


def _reserved_growth(run_step) -> int:
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved()
    for _ in range(12):
        run_step()
    torch.cuda.synchronize()
    return torch.cuda.memory_reserved() - before


def test_a_stream_per_call_caches_every_calls_blocks() -> None:
    """The cause, shown: blocks freed on a stream are kept for that stream, and `torch.cuda.Stream()` hands out
    a different one of its 32 each time."""
    def fresh_stream() -> None:
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            _step("cuda")
        stream.synchronize()

    growth = _reserved_growth(fresh_stream)
    print(f"a new stream per call: reserved grew {growth / MIB:.0f} MiB over 12 calls of {SIZE / MIB:.0f} MiB")
    assert growth >= 6 * SIZE


def test_own_stream_reuses_its_streams_and_their_blocks() -> None:
    growth = _reserved_growth(lambda: own_stream("cuda", _step, "cuda"))
    print(f"own_stream: reserved grew {growth / MIB:.0f} MiB over 12 calls of {SIZE / MIB:.0f} MiB")
    assert growth <= 2 * SIZE
