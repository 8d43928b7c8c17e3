"""Every prompt the data pipeline writes or sends.

- `single_turn_messages` / `agentic_messages`: the ``prompt`` column of exported veRL rows. They
  delegate to `cuda_agent.recipe.task_prompts`, the builders the recipe's own examples use, so
  every producer of rows writes the same text: the single-turn prompt carries the reference
  source and asks for fenced blocks whose info string is language and path (``cuda kernels/fused.cu``,
  ``python model_new.py``); the agentic prompt is a short task statement (the agent loop adds
  SKILL.md, the workspace and the tool schemas itself).
- `sft_messages`: a single-turn prompt plus an assistant answer made of the task's known solution.
- `composer_messages`: what the LLM composer sends to stack seed operators into one fused task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cuda_agent.data_gen.models import Device, Task

Message = dict[str, Any]

_LANGUAGES = {".cu": "cuda", ".cuh": "cuda", ".cpp": "cpp", ".cc": "cpp", ".h": "cpp", ".hpp": "cpp", ".py": "python"}


def single_turn_messages(task: Task, device: Device) -> list[Message]:
    """Prompt of a single-turn row: the reference source and the fenced-file answer format."""
    from cuda_agent.recipe.task_prompts import single_turn_prompt

    return single_turn_prompt(task.source, device)


def agentic_messages(task: Task, device: Device) -> list[Message]:
    """Prompt of an agentic row: a short task statement (the workspace holds model.py)."""
    from cuda_agent.recipe.task_prompts import agentic_prompt

    return agentic_prompt(task.id, device)


def fenced_answer(files: Mapping[str, str]) -> str:
    """Files as fenced blocks whose info string is the language and the path (model_new.py last)."""
    ordered = sorted(files.items(), key=lambda kv: (kv[0] == "model_new.py", kv[0]))
    blocks = []
    for path, text in ordered:
        suffix = path[path.rfind("."):] if "." in path else ""
        blocks.append(f"```{_LANGUAGES.get(suffix, 'text')} {path}\n{text.rstrip()}\n```")
    return "\n\n".join(blocks)


def sft_messages(task: Task, device: Device) -> list[Message]:
    """The single-turn prompt followed by the task's solution as the assistant answer."""
    if not task.solution:
        from cuda_agent.errors import ConfigError

        raise ConfigError(f"task {task.id} has no solution to build an SFT example from")
    return [*single_turn_messages(task, device), {"role": "assistant", "content": fenced_answer(task.solution)}]


COMPOSER_SYSTEM = (
    "You write PyTorch reference problems in the KernelBench format for a CUDA-kernel benchmark. "
    "Answer with exactly one ```python block and nothing else."
)


def composer_messages(seed_sources: Sequence[tuple[str, str]], *, device: Device, window_ms: tuple[float, float]) -> list[Message]:
    """Ask an LLM to stack the given operators (name, example source) into one fused `Model`."""
    examples = "\n\n".join(f"### {name}\n```python\n{source.strip()}\n```" for name, source in seed_sources)
    names = " -> ".join(name for name, _ in seed_sources)
    target = "an NVIDIA H100-class GPU in FP32" if device == "cuda" else "one CPU core"
    user = (
        f"Stack these {len(seed_sources)} PyTorch operators, in this order, into ONE new model: {names}.\n"
        "Each operator's own single-operator problem is shown below as an example of its constructor "
        "arguments and input shapes.\n\n"
        f"{examples}\n\n"
        "Write one self-contained file in the same format:\n"
        "- `class Model(nn.Module)` with `__init__` (constructor arguments as in the examples) and `forward` "
        "applying the operators in sequence, each consuming the previous result (adapt shapes with "
        "constructor arguments or a reshape when they do not fit);\n"
        "- module-level size constants, `get_inputs()` returning the input tensors and `get_init_inputs()` "
        "returning the constructor arguments;\n"
        "- deterministic (no dropout or random sampling in forward), finite outputs that depend on the inputs;\n"
        f"- sizes such that one eager forward takes between {window_ms[0]:g} and {window_ms[1]:g} ms on {target};\n"
        "- only `torch`, `torch.nn` and `torch.nn.functional` imports."
    )
    return [{"role": "system", "content": COMPOSER_SYSTEM}, {"role": "user", "content": user}]
