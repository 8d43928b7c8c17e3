"""`self` is the candidate's own object (harness/self_binding.py): every way to call a method of model_new.py
with another first argument is refused, and the ways honest code uses methods are not."""

from __future__ import annotations

import textwrap

import pytest
from test_hacks import model_new

from cuda_agent.sandbox_pool.harness import EvalStatus
from cuda_agent.sandbox_pool.harness.static_check import check_candidate

REACH = "    def grab(self):\n        return self._C\n"

FOREIGN_SELF = {
    "method_read_off_its_class": "class Peek:\n" + REACH + "\n\nc = Peek.grab(torch)\n",
    "class_aliased_first": "class Peek:\n" + REACH + "\n\nP = Peek\nc = P.grab(torch)\n",
    "class_in_a_container": "class Peek:\n" + REACH + "\n\nkinds = [Peek]\nc = kinds[0].grab(torch)\n",
    "function_outside_a_class": "def grab(self):\n    return self._C\n\n\nc = grab(torch)\n",
    "lambda_with_self": "grab = lambda self: self._C\nc = grab(torch)\n",
    "staticmethod_with_self": "class Peek:\n    @staticmethod\n    def grab(self):\n        return self._C\n\n\n"
                              "c = Peek().grab(torch)\n",
    "self_as_a_later_parameter": "class Peek:\n    def grab(this, self):\n        return self._C\n\n\n"
                                 "c = Peek().grab(torch)\n",
    "self_as_a_default": "class Peek:\n    def grab(this, self=torch):\n        return self._C\n\n\nc = Peek().grab()\n",
    "self_as_varargs": "class Peek:\n    def grab(*self):\n        return self[0]._C\n",
    "nested_function_with_self": "class Peek:\n    def outer(this):\n        def grab(self):\n            return self._C\n"
                                 "        return grab(torch)\n",
    "class_body_calls_its_method": "class Peek:\n" + REACH + "    c = grab(torch)\n",
    "class_body_keeps_its_method": "class Peek:\n" + REACH + "    table = {'g': grab}\n",
    "decorator_gets_the_method": "def call_on_torch(f):\n    f(torch)\n    return f\n\n\nclass Peek:\n"
                                 "    @call_on_torch\n    def grab(self):\n        return self._C\n",
    "self_rebound": "class Peek:\n    def grab(self):\n        self = torch\n        return self._C\n",
    "self_from_a_loop": "class Peek:\n    def grab(this):\n        for self in [torch]:\n            return self._C\n",
    "self_from_a_comprehension": "c = [self._C for self in [torch]]\n",
    "self_imported": "import torch as self\nc = self._C\n",
    "self_caught": "try:\n    pass\nexcept Exception as self:\n    pass\n",
    "self_read_at_module_level": "c = self._C\n",
    "metaclass": "class Peek(metaclass=torch.nn.Module):\n    pass\n",
    "torch_attribute_set_through_the_model": "",  # model_new's init below
}


def _source(name: str) -> str:
    if name == "torch_attribute_set_through_the_model":
        return model_new("return cuda_extension.scale_bias(x, self.scale, self.bias)",
                         init="self.t = torch\nself.t.equal = self.t.allclose")
    return model_new("return cuda_extension.scale_bias(x, self.scale, self.bias)", extra=FOREIGN_SELF[name])


@pytest.mark.parametrize("name", sorted(FOREIGN_SELF))
def test_a_method_called_with_a_foreign_self_is_refused(name: str) -> None:
    report = check_candidate({"model_new.py": _source(name), "kernels/k.cpp": ""})
    assert report.violations, name


HONEST_METHODS = model_new(
    """
    tiles = Tiles.make(Tiles.BLOCK)
    assert isinstance(tiles, (Tiles, Base)) and issubclass(Tiles, Base)
    width = Tiles.ceil_div(tiles.block, Tiles.BLOCK) + len(Base.KIND)
    run = self.runner()
    return run(x)
    """,
    init="self.extra = Tiles(Tiles.BLOCK)",
    extra='''
    class Base:
        KIND = "tiles"


    class Tiles(Base):
        BLOCK: int = 256

        def __init__(self, block: int) -> None:
            self._block = block

        @classmethod
        def make(cls, block: int) -> "Tiles":
            return cls(block)

        @staticmethod
        def ceil_div(a: int, b: int) -> int:
            return (a + b - 1) // b

        @property
        def block(self) -> int:
            return self._block

        @block.setter
        def block(self, value: int) -> None:
            self._block = value

        @torch.no_grad()
        def launch(self, x: torch.Tensor, other: "Tiles") -> torch.Tensor:
            return x
    ''',
).replace("    def forward(self, x):", '''    def runner(self):
        def run(x):
            return cuda_extension.scale_bias(x, self.scale, self.bias)
        return run

    @torch.no_grad()
    def forward(self, x):''').replace("super().__init__()", "super(ModelNew, self).__init__()")


def test_methods_as_honest_code_uses_them_pass() -> None:
    report = check_candidate({"model_new.py": HONEST_METHODS, "kernels/k.cpp": ""})
    assert report.ok, report.violations


def test_methods_as_honest_code_uses_them_are_rewarded(evaluate_cpu) -> None:
    result = evaluate_cpu(HONEST_METHODS, profile=True)
    assert result.status is EvalStatus.OK and result.reward >= 1.0, (result.status, result.error, result.violations)


def test_the_messages_name_the_rule() -> None:
    report = check_candidate({"model_new.py": _source("method_read_off_its_class"), "kernels/k.cpp": ""})
    assert any("Peek.grab" in v and "call it on an instance" in v for v in report.violations), report.violations
    text = textwrap.dedent(_source("function_outside_a_class"))
    report = check_candidate({"model_new.py": text, "kernels/k.cpp": ""})
    assert any("first parameter of a method" in v for v in report.violations), report.violations


def test_a_property_is_extended_but_not_taken_apart_in_its_class_body() -> None:
    source = model_new("return cuda_extension.scale_bias(x, self.scale, self.bias)",
                       extra="class Peek:\n    @property\n" + REACH + "    c = grab.fget(torch)\n")
    assert check_candidate({"model_new.py": source, "kernels/k.cpp": ""}).violations
