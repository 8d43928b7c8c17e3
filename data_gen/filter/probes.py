"""What one eager forward does besides computing: random numbers drawn, inputs written in place.

- **RNG**: every ATen operator that consumes the random generator carries the tag
  ``torch.Tag.nondeterministic_seeded`` (randn, rand_like, dropout, bernoulli, normal_, ...); a
  `TorchDispatchMode` records them, whatever the seed, and the global CPU / CUDA generator
  states are compared before and after (catches ``torch.manual_seed`` inside forward).
- **In-place writes to inputs**: an input's version counter moves (``x.relu_()``, ``x[0] = 1``)
  or its values change (writes through ``.data``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ForwardProbe:
    """Findings of one probed forward."""

    rng_ops: list[str] = field(default_factory=list)
    rng_state_changed: bool = False
    mutated_inputs: list[int] = field(default_factory=list)


def _rng_states(device: str) -> list[Any]:
    import torch

    states = [torch.random.get_rng_state()]
    if device.startswith("cuda"):
        states.append(torch.cuda.get_rng_state(device))
    return states


def _same(a: Any, b: Any) -> bool:
    import torch

    if a.is_floating_point() or a.is_complex():
        return bool(((a == b) | (torch.isnan(a) & torch.isnan(b))).all())
    return bool(torch.equal(a, b))


def probe_forward(call: Callable[[], Any], inputs: Sequence[Any], device: str) -> tuple[Any, ForwardProbe]:
    """Run `call` (a forward on `inputs`) once under the probes; returns its output and the findings."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    probe = ForwardProbe()

    class _RngRecorder(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if torch.Tag.nondeterministic_seeded in func.tags:
                probe.rng_ops.append(str(func.overloadpacket.__name__))
            return func(*args, **(kwargs or {}))

    tensors = [(i, x) for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
    versions = [x._version for _, x in tensors]
    copies = [x.clone() for _, x in tensors]
    before = _rng_states(device)
    with _RngRecorder():
        out = call()
    after = _rng_states(device)
    probe.rng_state_changed = any(not torch.equal(a, b) for a, b in zip(before, after))
    probe.mutated_inputs = [i for (i, x), version, copy in zip(tensors, versions, copies)
                            if x._version != version or not _same(x, copy)]
    return out, probe
