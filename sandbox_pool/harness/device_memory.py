"""Device memory of one GPU's evaluations (issue 36): what a candidate's child is expected to hold, what the
children of the device may hold together, and the budget a child draws its timed inputs ahead within.

The gate admits a child only while the estimated needs of the children alive on the device fit the budget
(gate.py, `DeviceGate.memory_budget`), within what the device has beside this process and any other; on an
80 GB H100 the pool's children otherwise ran out of memory beside each other and beside the worker's own cache
(issue 36: "160 MiB free")."""

from __future__ import annotations

from collections.abc import Callable

import torch

AHEAD_MAX_BYTES = 2 << 30
AHEAD_DEVICE_FRACTION = 1 / 64
"""A GPU child draws its timed calls' inputs before it asks for the device alone, up to the smaller of
these (2 GiB, 1/64 of the device's memory: eight children in flight hold at most 1/8 of it); the rest
are drawn between timed calls, as on a CPU. With 1/32 (4 GiB on an H200), 8-deep workers saw
candidates crash while sharing the device (2 and 5 of 32 evaluations, re-run solo)."""
CONTEXT_BYTES = 768 << 20
"""A child's CUDA context and the kernels torch loads into it (an estimate, on the high side)."""
CALL_COPIES = 4
"""A child holds a call's inputs and outputs about this many times over: the trial's draw and outputs, the
earlier outputs it keeps alive (`HELD_OUTPUTS`), the poisoned block, the caching allocator's slack."""
HEADROOM_FRACTION = 0.05
"""Of the device's memory, kept free of children's estimates: estimates are estimates."""


def ahead_budget(total_bytes: int) -> int:
    """Bytes of timed inputs a child on a device of `total_bytes` draws ahead (child/main.py `draw_ahead`)."""
    return int(min(AHEAD_MAX_BYTES, total_bytes * AHEAD_DEVICE_FRACTION))


def child_need(total_bytes: int, call_bytes: int) -> int:
    """The estimated device memory of a candidate's child whose calls take `call_bytes` of inputs and outputs
    (0: not known yet, the task's first evaluation on this worker)."""
    return CONTEXT_BYTES + ahead_budget(total_bytes) + CALL_COPIES * call_bytes


def device_total(device_index: int) -> int:
    """The GPU's memory in bytes."""
    return torch.cuda.get_device_properties(device_index).total_memory


def children_budget(device_index: int) -> Callable[[int], int]:
    """The gate's `memory_budget` for a GPU, read from the device each time it is called (`budget_bytes`)."""
    total = device_total(device_index)

    def budget(children_bytes: int) -> int:
        free, _ = torch.cuda.mem_get_info(device_index)
        return budget_bytes(total, used=total - free, own=torch.cuda.memory_reserved(device_index),
                            children=children_bytes)

    return budget


def budget_bytes(total: int, *, used: int, own: int, children: int) -> int:
    """What the evaluation children of a device of `total` bytes may hold together: the device less a headroom
    and less what anything else holds. That is at least this process's own (`own`: its caching allocator, plus
    its context); where the device's `used` bytes less the live children's estimated `children` bytes say more,
    that: another process on the device (a neighbour on the node, a training engine beside the reward), or
    children holding more than estimated, which the next admissions then make room for."""
    others = max(own + CONTEXT_BYTES, used - children)
    return int(total * (1 - HEADROOM_FRACTION)) - others
