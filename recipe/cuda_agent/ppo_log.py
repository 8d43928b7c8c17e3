"""What a ``main_ppo`` console log says: each step's metrics and each weight sync of the hf rollout.

veRL's console logger prints one line a step, ``step:N - key:value - key:value ...`` (values may be
numpy reprs such as ``np.float64(2.0)``); ``HFServerAdapter`` prints ``hf update_weights: ...`` after
every sync. The CPU step test and the training benchmarks read their runs through this module.
"""

from __future__ import annotations

import re

_NUMPY_REPR = re.compile(r"^np\.\w+\((.*)\)$")
_SYNC = re.compile(r"hf update_weights: (\d+) tensors, ([\d.]+) MB, step (\S+), digests (\{[^}]*\}), ([\d.]+) s")


def _value(text: str) -> float | str:
    text = _NUMPY_REPR.sub(r"\1", text.strip())
    try:
        return float(text)
    except ValueError:
        return text


def step_metrics(log: str) -> dict[int, dict[str, float | str]]:
    """Every ``step:N`` line of the log, as {step: {metric: value}} (numbers as floats)."""
    steps: dict[int, dict[str, float | str]] = {}
    for match in re.finditer(r"step:(\d+) - (.*)", log):
        items = (item.split(":", 1) for item in match.group(2).split(" - ") if ":" in item)
        steps[int(match.group(1))] = {key.strip(): _value(value) for key, value in items}
    return steps


def weight_syncs(log: str) -> list[dict[str, object]]:
    """Every ``hf update_weights`` line: tensors, MB, the step tagged, the digests, seconds."""
    return [
        {"tensors": int(m.group(1)), "mb": float(m.group(2)), "step": m.group(3), "digests": m.group(4),
         "seconds": float(m.group(5))}
        for m in _SYNC.finditer(log)
    ]
