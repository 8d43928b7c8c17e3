"""Reading a child's trial outputs: raw bytes described by a JSON layout (protocol.TensorLayout).

The child is untrusted, so the layout is validated before a byte is read: known dtypes only,
sizes that agree with shapes, ranges inside the sealed shared region (output_buffer.py) or
the file, aligned offsets. No pickle, and no mmap of a file the child could shrink (SIGBUS):
the only mapping is of the region, whose size is sealed. What is read is copied before it is
judged.
"""

from __future__ import annotations

import math
import os
from typing import Any

import torch
from pydantic import ValidationError

from cuda_agent.sandbox_pool.harness.output_buffer import ALIGN, OutputRegion
from cuda_agent.sandbox_pool.harness.protocol import TensorLayout

_DTYPES = {
    str(d).removeprefix("torch."): d
    for d in (torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
              torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
              torch.float8_e4m3fn, torch.float8_e5m2)
}
MAX_OUTPUTS = 64


class OutputFormatError(Exception):
    """The child's output file or layout is malformed (a violation by the candidate's process)."""


def read_outputs(path: str, layout: Any, device: str, region: OutputRegion | None = None) -> list[Any]:
    """The outputs described by `layout`, from the shared `region` or the raw file at `path`,
    as tensors on `device` that the child can no longer touch."""
    if not isinstance(layout, list) or len(layout) > MAX_OUTPUTS:
        raise OutputFormatError("the output layout is missing or malformed")
    try:
        entries = [TensorLayout.model_validate(e) for e in layout]
    except ValidationError as exc:
        raise OutputFormatError(f"the output layout is malformed: {exc.errors()[0]['msg']}") from None
    if any(e.shared for e in entries):
        if not all(e.shared or e.dtype is None for e in entries):
            raise OutputFormatError("the output layout mixes the shared region and the file")
        if region is None or region.nbytes == 0:
            raise OutputFormatError("the output layout names a shared region this evaluation does not have")
        return [_read_shared(region, entry, device) for entry in entries]
    try:
        handle = open(path, "rb")
    except OSError:
        raise OutputFormatError("the output file is missing") from None
    with handle:
        size = os.fstat(handle.fileno()).st_size
        return [_read_one(handle, entry, size, device) for entry in entries]


def _checked_dtype(entry: TensorLayout, size: int) -> torch.dtype:
    """The entry's dtype, once its shape, byte count and range agree with each other and with `size`."""
    dtype = _DTYPES.get(entry.dtype or "")
    if dtype is None:
        raise OutputFormatError(f"unsupported output dtype {entry.dtype!r}")
    if any(d < 0 for d in entry.shape):
        raise OutputFormatError(f"negative output shape {entry.shape}")
    itemsize = torch.empty((), dtype=dtype).element_size()
    if entry.nbytes != math.prod(entry.shape) * itemsize or entry.offset < 0 or entry.offset + entry.nbytes > size:
        raise OutputFormatError("the output layout disagrees with the output's bytes")
    return dtype


def _read_shared(region: OutputRegion, entry: TensorLayout, device: str) -> Any:
    if entry.dtype is None:
        return entry.value
    dtype = _checked_dtype(entry, region.nbytes)
    if entry.offset % ALIGN:
        raise OutputFormatError(f"output offset {entry.offset} is not a multiple of {ALIGN}")
    raw = region.read(entry.offset, entry.nbytes)
    typed = raw.view(dtype) if entry.nbytes else torch.empty(0, dtype=dtype)
    return typed.reshape(entry.shape).to(device, copy=True)  # a copy: the region is the child's to write


def _read_one(handle: Any, entry: TensorLayout, size: int, device: str) -> Any:
    if entry.dtype is None:
        return entry.value
    dtype = _checked_dtype(entry, size)
    tensor = torch.empty(entry.shape, dtype=dtype)
    if entry.nbytes:
        handle.seek(entry.offset)
        view = memoryview(tensor.reshape(-1).view(torch.uint8).numpy())
        if handle.readinto(view) != entry.nbytes:
            raise OutputFormatError("the output file is shorter than its layout")
    return tensor.to(device)
