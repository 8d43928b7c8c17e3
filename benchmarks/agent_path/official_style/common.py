"""Shared bits of the official-style scripts: device and tensor moves."""

from __future__ import annotations

import os


def device() -> str:
    return os.environ.get("OFFICIAL_DEVICE", "cuda")


def move(value, fn):  # noqa: ANN001, ANN201 - nested tensors
    import torch

    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return [move(v, fn) for v in value]
    return value


def models_and_inputs():  # noqa: ANN201
    """Model and ModelNew built in this process, weights shared, inputs on the device."""
    from model import Model, get_init_inputs, get_inputs
    from model_new import ModelNew

    dev = device()
    init = get_init_inputs()
    init = list(init) if isinstance(init, (list, tuple)) else [init]
    ref = Model(*init).eval().to(dev)
    new = ModelNew(*init).eval().to(dev)
    new.load_state_dict(ref.state_dict())

    def inputs():  # noqa: ANN202
        raw = get_inputs()
        raw = list(raw) if isinstance(raw, (list, tuple)) else [raw]
        first = move(raw, lambda t: t.to(dev))
        return first, move(first, lambda t: t.clone())

    return ref, new, inputs
