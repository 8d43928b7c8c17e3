"""Reading a child's trial outputs: raw bytes described by a JSON layout (protocol.TensorLayout).

The child is untrusted, so the layout is validated before a byte is read: known dtypes only,
sizes that agree with shapes, ranges inside the sealed shared region (output_buffer.py) or
the file, aligned offsets, and the reference's count, dtypes and shapes (ranges may overlap, so
without that a forged layout could name the same bytes 64 times and make the parent copy them
64 times over). No pickle, and no mmap of a file the child could shrink (SIGBUS): the only
mapping is of the region, whose size is sealed. What is read is copied before it is judged.
"""

from __future__ import annotations

import math
import os
import stat
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


class OutputMismatch(Exception):
    """The layout describes outputs other than the reference's (count, dtype, shape): wrong, judged unread."""


def read_outputs(path: str, layout: Any, device: str, region: OutputRegion | None = None,
                 expected: list[Any] | None = None) -> list[Any]:
    """The outputs described by `layout`, from the shared `region` or the raw file at `path`,
    as tensors on `device` that the child can no longer touch. With `expected` (the reference's
    outputs), a layout of other outputs raises `OutputMismatch` before anything is read."""
    if not isinstance(layout, list) or len(layout) > MAX_OUTPUTS:
        raise OutputFormatError("the output layout is missing or malformed")
    try:
        entries = [TensorLayout.model_validate(e) for e in layout]
    except ValidationError as exc:
        raise OutputFormatError(f"the output layout is malformed: {exc.errors()[0]['msg']}") from None
    if expected is not None and (problem := layout_mismatch(entries, expected)):
        raise OutputMismatch(problem)
    if any(e.shared for e in entries):
        if not all(e.shared or e.dtype is None for e in entries):
            raise OutputFormatError("the output layout mixes the shared region and the file")
        if region is None or region.nbytes == 0:
            raise OutputFormatError("the output layout names a shared region this evaluation does not have")
        return [_read_shared(region, entry, device) for entry in entries]
    try:  # the child owns its work folder: no link followed, no wait on a FIFO or a device it put there
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        raise OutputFormatError("the output file is missing (or a link)") from None
    with os.fdopen(fd, "rb") as handle:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise OutputFormatError("the output file is not a regular file")
        return [_read_one(handle, entry, status.st_size, device) for entry in entries]


def layout_mismatch(entries: list[TensorLayout], expected: list[Any]) -> str | None:
    """How the described outputs differ from the reference's in count, type, dtype or shape (the words of
    compare.compare_outputs), or None."""
    if len(entries) != len(expected):
        return f"expected {len(expected)} output tensor(s), got {len(entries)}"
    for i, (entry, ref) in enumerate(zip(entries, expected)):
        if not isinstance(ref, torch.Tensor):
            if entry.dtype is not None:
                return f"output {i}: expected {ref!r}, got a tensor of shape {tuple(entry.shape)}"
        elif entry.dtype is None:
            return f"output {i}: expected a torch.Tensor, got {type(entry.value).__name__}"
        elif entry.dtype != str(ref.dtype).removeprefix("torch."):
            return f"output {i}: dtype mismatch: expected {ref.dtype}, got torch.{entry.dtype}"
        elif tuple(entry.shape) != tuple(ref.shape):
            return f"output {i}: shape mismatch: expected {tuple(ref.shape)}, got {tuple(entry.shape)}"
    return None


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
