"""The user messages of cuda_agent dataset rows (single-turn and agentic).

Used by examples/data/make_example_parquet.py and meant for data_gen's export, so every
producer of rows writes the same prompts. The agentic loop adds SKILL.md, the task section
and the tool schemas itself (recipe/cuda_agent/prompt.py); the single-turn prompt must carry
everything, the reference source and the answer format included.
"""

from __future__ import annotations

from typing import Any

_DEVICE_HINT = {
    "cuda": "CUDA kernels (`kernels/<name>.cu` with an `extern \"C\"` launcher, plus `kernels/<name>_binding.cpp`)",
    "cpu": "C++ kernels (`kernels/<name>.cpp` holding the loop and its binding)",
}


def single_turn_prompt(problem_src: str, device: str) -> list[dict[str, Any]]:
    """Chat messages asking for one answer with fenced, path-labelled files."""
    user = (
        "Rewrite the PyTorch model below so that it runs faster, with the work done by your own "
        f"{_DEVICE_HINT[device]}.\n\n"
        "Reference `model.py`:\n"
        f"```python model.py\n{problem_src.rstrip()}\n```\n\n"
        "Answer with every file you write as a fenced code block whose info string is the language and "
        "the path, for example:\n"
        "```cuda kernels/fused.cu\n...\n```\n"
        "```python model_new.py\n...\n```\n"
        "`model_new.py` defines `ModelNew` (same constructor arguments as `Model`) and calls the compiled "
        "module `cuda_extension`; only `model_new.py` and files under `kernels/` are used. Each kernel file "
        "registers its functions with `REGISTER_BINDING(name, fn)` from `../binding_registry.h`. Doing the "
        "computation with torch operators instead of your kernels is scored as a failure."
    )
    return [{"role": "user", "content": user}]


def agentic_prompt(task_id: str, device: str) -> list[dict[str, Any]]:
    """Chat messages starting an agentic trajectory (the workspace holds the reference)."""
    user = (
        f"Task {task_id}: make the model in `model.py` faster than `torch.compile` with your own "
        f"{_DEVICE_HINT[device]}, following SKILL.md. Work in the current workspace with the tools; "
        "stop when verification passes and profiling shows you are faster."
    )
    return [{"role": "user", "content": user}]
