"""Turns a chain of instantiated operators into KernelBench-format source, and infers shapes.

`render_source` writes the `Model` class (constructor arguments become `get_init_inputs()`
and module-level constants, as in KernelBench), `get_inputs()` and `get_init_inputs()`.
`infer_output` runs one `OpCall` on the meta device: shapes without compute, so that the
composer can chain operators at GPU sizes on a laptop.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cuda_agent.data_gen.ops.base import InputSpec, OpCall, OpTemplate

BASE_IMPORTS = ("import torch", "import torch.nn as nn", "import torch.nn.functional as F")
_EXTRA_INPUT_NAMES = ("y", "z", "w", "u", "v", "s", "t")


@dataclass(frozen=True)
class Step:
    """One operator of a chain: its template and its instantiation."""

    template: OpTemplate
    call: OpCall


class _Strict(dict[str, str]):
    def __missing__(self, key: str) -> str:
        raise KeyError(f"template placeholder {{{key}}} has no value")


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def _module_attr(ctor: str) -> str:
    match = re.match(r"\s*([\w.]+)\s*\(", ctor)
    return _snake(match.group(1).rsplit(".", 1)[-1]) if match else "op"


def _unique(name: str, used: set[str], suffix: int) -> str:
    candidate = name if name not in used else f"{name}_{suffix}"
    counter = suffix
    while candidate in used:
        counter += 1
        candidate = f"{name}_{counter}"
    used.add(candidate)
    return candidate


def _literal(value: Any) -> str:
    return repr(value)


@dataclass
class _Rendered:
    init_args: list[tuple[str, Any]]
    init_lines: list[str]
    forward_lines: list[str]
    inputs: list[tuple[str, InputSpec]]
    imports: list[str]


def _render_steps(steps: Sequence[Step], primary: InputSpec) -> _Rendered:
    out = _Rendered([], [], [], [("x", primary)], list(BASE_IMPORTS))
    used_params: set[str] = set()
    used_attrs: set[str] = {"training"}
    extra_names = iter(_EXTRA_INPUT_NAMES)
    for index, step in enumerate(steps, 1):
        call = step.call
        names = {p: _unique(p, used_params, index) for p in call.params}
        out.init_args += [(names[p], v) for p, v in call.params.items()]
        ctor_map = _Strict({p: g for p, g in names.items()})
        fwd_map = _Strict({p: f"self.{g}" for p, g in names.items()})
        fwd_map["x"] = "x"
        for key, ctor in call.modules.items():
            attr = _unique(key or _module_attr(ctor), used_attrs, index)
            out.init_lines.append(f"self.{attr} = {ctor.format_map(ctor_map)}")
            fwd_map["m" if not key else f"m_{key}"] = f"self.{attr}"
        forward_text = " ".join((call.call, *call.pre))
        for p, g in names.items():
            if "{" + p + "}" in forward_text:
                out.init_lines.append(f"self.{g} = {g}")
        for number, spec in enumerate(call.extra_inputs, 1):
            name = next(extra_names)
            out.inputs.append((name, spec))
            fwd_map[f"x{number}"] = name
        out.forward_lines += [statement.format_map(fwd_map) for statement in call.pre]
        out.forward_lines.append(f"x = {call.call.format_map(fwd_map)}")
        out.imports += [line for line in call.imports if line not in out.imports]
    return out


def render_source(steps: Sequence[Step], primary: InputSpec, description: str) -> str:
    """KernelBench-format model.py text for a chain of operators applied to `primary`."""
    r = _render_steps(steps, primary)
    arg_names = [name for name, _ in r.init_args]
    lines = [*r.imports, "", "", "class Model(nn.Module):", f'    """{description}"""', ""]
    lines.append(f"    def __init__(self{''.join(', ' + a for a in arg_names)}):")
    lines.append("        super().__init__()")
    lines += [f"        {line}" for line in r.init_lines]
    lines += ["", f"    def forward(self, {', '.join(name for name, _ in r.inputs)}):"]
    lines += [f"        {line}" for line in r.forward_lines]
    lines += ["        return x", "", ""]
    lines += [f"{name} = {_literal(value)}" for name, value in r.init_args]
    if r.init_args:
        lines += ["", ""]
    lines += ["def get_inputs():", f"    return [{', '.join(spec.render() for _, spec in r.inputs)}]", "", ""]
    lines += ["def get_init_inputs():", f"    return [{', '.join(arg_names)}]", ""]
    return "\n".join(lines)


def infer_output(call: OpCall, x: Any) -> Any:
    """Run `call` on a meta tensor `x`; returns the meta output (raises whatever torch raises)."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    literals: Mapping[str, str] = {p: _literal(v) for p, v in call.params.items()}
    namespace: dict[str, Any] = {"torch": torch, "nn": nn, "F": F, "x": x}
    fwd_map = _Strict(literals)
    fwd_map["x"] = "x"
    for number, spec in enumerate(call.extra_inputs, 1):
        namespace[f"x{number}"] = spec.meta()
        fwd_map[f"x{number}"] = f"x{number}"
    with torch.device("meta"):
        for key, ctor in call.modules.items():
            name = "m" if not key else f"m_{key}"
            namespace[name] = eval(ctor.format_map(_Strict(literals)), namespace)  # noqa: S307 - our own templates
            fwd_map[name] = name
        for statement in call.pre:
            exec(statement.format_map(fwd_map), namespace)  # noqa: S102 - our own templates
        return eval(call.call.format_map(fwd_map), namespace)  # noqa: S307 - our own templates
