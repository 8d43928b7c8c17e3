"""Extension, eager PyTorch and torch.compile timed with torch.profiler over 10 calls, in this process."""

from __future__ import annotations

import sys

sys.path.insert(0, ".")


def _time(model, args, iters: int = 10) -> float:  # noqa: ANN001
    import torch

    from official_style.common import device

    cuda = device() == "cuda"
    activity = torch.profiler.ProfilerActivity.CUDA if cuda else torch.profiler.ProfilerActivity.CPU
    with torch.no_grad():
        for _ in range(5):
            model(*args)
        with torch.profiler.profile(activities=[activity]) as prof:
            if cuda:
                torch.cuda.synchronize()
            for _ in range(iters):
                model(*args)
            if cuda:
                torch.cuda.synchronize()
    if cuda:
        return sum(e.device_time for e in prof.events() if e.device_type.name == "CUDA") / iters
    return sum(e.self_cpu_time_total for e in prof.events()) / iters


def main() -> int:
    import torch

    from official_style.common import models_and_inputs

    ref, new, inputs = models_and_inputs()
    a, b = inputs()
    compiled = torch.compile(ref)
    ext, eager, comp = _time(new, b), _time(ref, a), _time(compiled, a)
    print(f"Torch Baseline: {eager:.3f}us, Torch Compile: {comp:.3f}us, CUDA Extension: {ext:.3f}us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
