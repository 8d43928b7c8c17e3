"""Five correctness checks of ModelNew against Model, in this process (atol = rtol = 1e-2)."""

from __future__ import annotations

import sys

sys.path.insert(0, ".")


def main() -> int:
    import torch

    from official_style.common import device, models_and_inputs

    ref, new, inputs = models_and_inputs()
    with torch.no_grad():
        for i in range(5):
            a, b = inputs()
            torch.testing.assert_close(new(*b), ref(*a), atol=1e-2, rtol=1e-2)
            print(f"[PASS] check {i + 1}/5")
    if device() == "cuda":
        torch.cuda.synchronize()
    print("[PASS] verify success")
    return 0


if __name__ == "__main__":
    sys.exit(main())
