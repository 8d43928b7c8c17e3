"""Every defence of the catalogue (docs/defences.md) that the harness owns: cheating candidates get -1, honest
ones don't.

The kernels are shared (candidates/kernels.cpp, compiled once thanks to the cache); each case varies
model_new.py or adds a kernel source. Each case belongs to one defence of
sandbox_pool/harness/defences/catalogue.py and its test id starts with that defence's id; a leading number is
the public threat class it answers (the catalogue's `threat`).
"""

from __future__ import annotations

import textwrap

import pytest
from defence_cases import catalogued
from test_symbols import RAW_WRITE

from cuda_agent.sandbox_pool.harness import EvalOptions, EvalStatus

HEADER = "import torch\nimport torch.nn as nn\nimport cuda_extension\n\n"


def model_new(forward: str, init: str = "", extra: str = "") -> str:
    body = textwrap.indent(textwrap.dedent(forward).strip(), " " * 8)
    init_body = textwrap.indent(textwrap.dedent(init).strip(), " " * 8) if init else ""
    return HEADER + textwrap.dedent(extra) + textwrap.dedent(
        """
        class ModelNew(nn.Module):
            def __init__(self, dim):
                super().__init__()
                self.scale = nn.Parameter(torch.ones(dim))
                self.bias = nn.Parameter(torch.zeros(dim))
        {init}
            def forward(self, x):
        {body}
        """
    ).format(init=init_body, body=body)


HONEST = model_new("return cuda_extension.scale_bias(x, self.scale, self.bias)")

CHEATS = {
    "01_torch_fallback": model_new("return x * self.scale + self.bias"),
    "01_torch_fallback_functional": model_new("return torch.nn.functional.linear(x, torch.diag(self.scale), self.bias)"),
    "02_try_except_fallback": model_new(
        """
        try:
            return cuda_extension.does_not_exist(x)
        except Exception:
            return torch.addcmul(self.bias, x, self.scale)
        """
    ),
    "03_reference_import": "from model import Model\n" + model_new("return Model.forward(self, x)"),
    "03_reference_exec": model_new("return eval('x * self.scale + self.bias')"),
    "04_decoy_kernel": model_new(
        """
        cuda_extension.scale_bias(x[:1], self.scale, self.bias)
        return x.mul(self.scale).add(self.bias)
        """
    ),
}

# Caching keyed by pointer: `data_ptr` is refused in model_new.py (a cache key, nothing else).
CACHE_BY_POINTER = model_new(
        """
        key = x.data_ptr()
        if key not in self.cache:
            self.cache[key] = cuda_extension.scale_bias(x, self.scale, self.bias)
        return self.cache[key]
        """,
        init="self.cache = {}",
)

CACHE_BY_CONTENT = model_new(
    """
    key = (tuple(x.shape), float(x[0, 0]), float(x[-1, -1]))
    if key not in self.cache:
        self.cache[key] = cuda_extension.scale_bias(x, self.scale, self.bias)
    return self.cache[key]
    """,
    init="self.cache = {}",
)

CHEATS |= {
    "05_cache_by_pointer": CACHE_BY_POINTER,
    "05_cache_by_content": CACHE_BY_CONTENT,
    "06_batch_and_skip": model_new(
        """
        self.calls += 1
        if self.calls <= 6:
            self.last = cuda_extension.scale_bias(x, self.scale, self.bias)
        return self.last
        """,
        init="self.calls = 0\nself.last = None",
    ),
    "07_detect_by_call_count": model_new(
        """
        self.calls += 1
        if self.calls > 7:
            return cuda_extension.uninitialized(x)
        return cuda_extension.scale_bias(x, self.scale, self.bias)
        """,
        init="self.calls = 0",
    ),
    "07_detect_by_stack": "import inspect\n" + HONEST,
    "08_grader_state_gc": "import gc\n" + HONEST,
    "08_grader_state_frames": model_new("return cuda_extension.scale_bias(x, self.scale, self.bias) if x.__class__ else None"),
    "09_timer_patch_event": HONEST + "\ntorch.cuda.Event = object\n",
    "09_timer_patch_time": "import time\n" + HONEST + "\ntime.perf_counter_ns = lambda: 0\n",
    "09_profiler_patch": HONEST + "\ntorch.profiler.profile = None\n",
    "10_side_thread": "import threading\n" + HONEST,
    "11_lazy_subclass": model_new(
        "return cuda_extension.scale_bias(x, self.scale, self.bias).as_subclass(Lazy)",
        extra="class Lazy(torch.Tensor):\n    pass\n\n",
    ),
    "12_stale_memory": model_new("return cuda_extension.uninitialized(x)"),
    "14_input_mutation": model_new("return cuda_extension.scale_bias_inplace(x, self.scale, self.bias)"),
    "15_constant_output": model_new("return torch.zeros_like(x)"),
    "16_distribution_shortcut": model_new("return cuda_extension.bias_only(x, self.bias)"),
    "17_subsampling": model_new("return cuda_extension.every_other_row(x, self.scale, self.bias)"),
    "20_default_init_exploit": model_new("return cuda_extension.identity_copy(x)"),
    "19_ignores_init_args": model_new("return cuda_extension.scale_bias(x, torch.ones_like(self.scale), self.bias)"),
    "dispatch_internals": model_new("return cuda_extension.scale_bias(x, self.scale, self.bias)",
                                    extra="from torch.utils._python_dispatch import _pop_mode_temporarily\n"),
    "builtins_escape": model_new("return getattr(torch, 'add')(x, self.bias)"),
}

KERNEL_CHEATS = {
    "01_aten_from_cpp": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include "../binding_registry.h"
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) { return at::addcmul(b, x, s); }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
    "01_aten_method_from_cpp": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include "../binding_registry.h"
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) { return x.mul(s).add(b); }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
    "08_read_proc": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include <fstream>
        #include "../binding_registry.h"
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) { std::ifstream m("/proc/1/mem"); return x; }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
    "10_std_thread": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include <thread>
        #include "../binding_registry.h"
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) { std::thread t([]{}); t.join(); return x; }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
    "22_network": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include <sys/socket.h>
        #include "../binding_registry.h"
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) { int fd = socket(AF_INET, SOCK_STREAM, 0); (void)fd; return x; }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
    "23_fork_bomb": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include <unistd.h>
        #include "../binding_registry.h"
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) { while (true) fork(); return x; }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
    # The child's pipe to the parent and the outside clock's socket are the candidate process's descriptors:
    # writing, closing or reaching them by a raw system call is how messages and stamps are forged.
    "forge_by_write": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include <unistd.h>
        #include "../binding_registry.h"
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) {
          for (int fd = 3; fd < 64; ++fd) (void)!write(fd, "\\0\\0\\0\\2{}", 6);
          return x;
        }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
    "close_the_clock": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include <unistd.h>
        #include "../binding_registry.h"
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) { for (int fd = 3; fd < 64; ++fd) close(fd); return x; }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
    "forge_by_inline_system_call": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include "../binding_registry.h"
        """ + RAW_WRITE + """
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) {
          for (int fd = 3; fd < 64; ++fd) raw_write(fd, "x", 1);
          return x;
        }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
    "python_from_cpp": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include "../binding_registry.h"
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) {
          auto torch_mod = pybind11::module_::import("torch");
          return torch_mod.attr("addcmul")(b, x, s).cast<torch::Tensor>();
        }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
}


@pytest.mark.parametrize("name", catalogued(CHEATS))
def test_cheating_model_new_is_rejected(evaluate_cpu, name: str) -> None:
    profile = name.startswith(("05_", "06_", "07_detect_by_call"))
    result = evaluate_cpu(CHEATS[name], profile=profile)
    assert result.reward == -1.0, (name, result.status, result.error)
    assert result.status in (EvalStatus.VIOLATION, EvalStatus.INCORRECT, EvalStatus.STATIC_CHECK_FAILED), result.error


@pytest.mark.parametrize("name", catalogued(KERNEL_CHEATS))
def test_cheating_kernel_is_rejected(evaluate_cpu, name: str) -> None:
    result = evaluate_cpu(HONEST, textwrap.dedent(KERNEL_CHEATS[name]))
    assert result.reward == -1.0, (name, result.status, result.error)
    assert result.status is EvalStatus.VIOLATION, result.error


def test_symbol_policy_catches_aten_even_without_source_patterns(evaluate_cpu) -> None:
    # The source check does not know `at::addcmul`; the built module's imported symbols do.
    result = evaluate_cpu(HONEST, textwrap.dedent(KERNEL_CHEATS["01_aten_from_cpp"]))
    assert result.stages["static_check"].ok is True
    assert result.stages["compile"].ok is False
    assert any("addcmul" in v for v in result.violations)


@pytest.mark.parametrize(("name", "says"), [
    ("forge_by_write", "imports write (file descriptor I/O)"),
    ("close_the_clock", "imports close (file descriptor I/O)"),
    ("forge_by_inline_system_call", "makes system calls itself"),
])
def test_reaching_the_harness_descriptors_is_refused_at_the_build(evaluate_cpu, name: str, says: str) -> None:
    """No source pattern names these (the harness's own sockets are reached by descriptor number, the system
    call by an instruction): the built objects' symbols and machine code do."""
    result = evaluate_cpu(HONEST, textwrap.dedent(KERNEL_CHEATS[name]))
    assert result.stages["static_check"].ok is True
    assert result.status is EvalStatus.VIOLATION and any(says in v for v in result.violations), result.violations


# Code left behind for the harness to run after the call: outside the compute guard and the timed window.
# Both reach torch through a helper's method called with torch as its `self`: refused by the static check since
# 2026-12-04 (harness/self_binding.py, test_self_binding.py); with it out of the way the child still sees the
# candidate's code run when it is not its turn (child/turns.py): the run-time layer holds on its own.
LEAVES_CODE_BEHIND = {
    # torch_fallback + timer_patching: a torch fallback computed after the call by a replaced torch function and method;
    # rewarded 3 on 2026-12-04 before the watch (reported time: an uninitialised tensor's).
    "torch_patched_through_an_alias": model_new(
        """
        out = cuda_extension.uninitialized(x)
        pending.append((out, x, self.scale, self.bias))
        return out
        """,
        extra="""
        pending = []


        class Patch:  # `self` is whatever it is called on
            def detach(self, hook):
                self.detach = hook

            def equal(self, hook):
                self.equal = hook


        def fill():
            while pending:
                out, x, s, b = pending.pop()
                out.copy_(torch.addcmul(b, x, s))


        original_detach, original_equal = torch.Tensor.detach, torch.equal


        def detach_after_filling(t):
            fill()
            return original_detach(t)


        def equal_after_filling(a, b):
            fill()
            return original_equal(a, b)


        Patch.detach(torch.Tensor, detach_after_filling)
        Patch.equal(torch, equal_after_filling)
        """,
    ),
    # a finalizer on an object hung on the output: it runs when the harness lets the output go
    "finalizer_on_the_output": model_new(
        """
        out = cuda_extension.scale_bias(x, self.scale, self.bias)
        Keeper.hang(out, Keeper())
        return out
        """,
        extra="""
        class Keeper:
            def hang(self, keeper):
                self.keeper = keeper

            def __del__(self):
                pass
        """,
    ),
}


@pytest.mark.parametrize("name", catalogued(LEAVES_CODE_BEHIND))
def test_code_left_for_the_harness_to_run_is_a_violation(evaluate_cpu, name: str, static_check_off) -> None:
    result = evaluate_cpu(LEAVES_CODE_BEHIND[name], profile=True)
    assert result.stages["static_check"].ok is True, result.violations
    assert result.status is EvalStatus.VIOLATION and result.reward == -1.0, (result.status, result.error)
    assert any("ran outside the candidate's import, construction and forward calls" in v
               for v in result.violations), result.violations


HONEST_WITH_HELPERS = model_new(
    """
    helper = self.helper
    return helper.run(x)
    """,
    init="self.helper = Helper(self.scale, self.bias)",
    extra="""
    def launch(x, s, b):
        return cuda_extension.scale_bias(x, s, b)


    class Helper:
        def __init__(self, s, b):
            self.s, self.b = s, b
            self.kernel = lambda x: launch(x, self.s, self.b)

        def run(self, x):
            return self.kernel(x.contiguous())
    """,
)


def test_helpers_called_from_forward_are_the_candidates_turn(evaluate_cpu) -> None:
    result = evaluate_cpu(HONEST_WITH_HELPERS, profile=True)
    assert result.status is EvalStatus.OK and result.reward >= 1.0, (result.status, result.error, result.violations)


# The static check reads raw text; these spell nothing it refuses until the preprocessor has run.
MACRO_HIDDEN = {
    "own_macro_names_attr": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include "../binding_registry.h"
        #define REACH attr
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) { return x; }
        static void reg(pybind11::module& m) { (void)m.REACH("__dict__"); m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
    "library_macro_pastes_python_api": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include <c10/macros/Macros.h>
        #include "../binding_registry.h"
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) { return x; }
        static void reg(pybind11::module& m) {
          (void)C10_CONCATENATE(Py, Object_GetAttrString)(m.ptr(), "__dict__");
          m.def("scale_bias", &f);
        }
        REGISTER_BINDING(f, reg);
    """,
}

HONEST_WITH_MACROS = """
    #include <torch/types.h>
    #include <torch/csrc/utils/pybind.h>
    #include <c10/macros/Macros.h>
    #include "../binding_registry.h"
    #define CHECK_2D(t) TORCH_CHECK((t).dim() == 2 && (t).is_contiguous(), #t " must be a contiguous matrix")
    #define AT(i, j) ((i) * d + (j))
    #define DATA(t) (t).data_ptr<float>()
    static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) {
      CHECK_2D(x);
      auto out = torch::empty_like(x);
      const int64_t n = x.size(0), d = x.size(1);
      const float *px = DATA(x), *ps = DATA(s), *pb = DATA(b);
      float* po = DATA(out);
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < d; ++j) po[AT(i, j)] = px[AT(i, j)] * ps[j] + pb[j];
      return out;
    }
    static void C10_CONCATENATE(reg_, scale_bias)(pybind11::module& m) { m.def("scale_bias", &f); }
    REGISTER_BINDING(f, reg_scale_bias);
"""


@pytest.mark.parametrize("name", catalogued(MACRO_HIDDEN))
def test_what_macros_assemble_is_refused_at_the_build(evaluate_cpu, name: str) -> None:
    result = evaluate_cpu(HONEST, textwrap.dedent(MACRO_HIDDEN[name]))
    assert result.stages["static_check"].ok is True
    assert result.status is EvalStatus.VIOLATION, (result.status, result.error)
    assert any("after macro expansion" in v and "Python" in v for v in result.violations), result.violations


def test_a_kernel_written_with_macros_is_accepted(evaluate_cpu) -> None:
    result = evaluate_cpu(HONEST, textwrap.dedent(HONEST_WITH_MACROS))
    assert result.status is EvalStatus.OK, (result.status, result.error, result.violations)


def test_harness_infrastructure_files_are_never_taken_from_the_candidate(evaluate_cpu) -> None:
    files = {"model_new.py": HONEST, "kernels/k.cpp": (evaluate_cpu.__globals__["KERNELS"]),
             "binding.cpp": "PYBIND11_MODULE(cuda_extension, m) {}", "utils/verification.py": "print('ok')"}
    result = evaluate_cpu("", files=files)
    assert result.status is EvalStatus.STATIC_CHECK_FAILED
    assert "binding.cpp" in (result.error or "") and result.reward == -1.0


# Found by red-teaming (see docs/history/red_team.md): each was rewarded before its fix.
RED_TEAM_MODEL_NEW = {
    "numpy_compute": model_new("return torch.from_numpy(x.numpy() * self.scale.numpy() + self.bias.numpy())"),
    "reexported_sys_patches_guard": model_new(
        "return x * self.scale + self.bias",
        extra="torch.sys.modules['cuda_agent.sandbox_pool.harness.child.guard'].ComputeGuard.enabled = False\n",
    ),
    "dataclasses_builtins_setattr": "import dataclasses\n" + HONEST,
    "frames_through_typing": model_new("return cuda_extension.scale_bias(x, self.scale, self.bias)",
                                       extra="import typing\nframe = typing.sys._getframe\n"),
    "initial_seed_precompute": model_new("return cuda_extension.scale_bias(x, self.scale, self.bias)",
                                         init="self.s = torch.initial_seed()"),
    # the string of an annotation evaluated by typing: all of sys.modules (the harness's own modules) at import
    "annotation_evaluated_by_typing": model_new(
        "return cuda_extension.scale_bias(x, self.scale, self.bias)",
        extra="import typing\n\n\nclass Reach:\n    mods: \"__import__('sys').modules\"\n\n\n"
              "modules = typing.get_type_hints(Reach)['mods']\n"),
    "annotation_evaluated_by_typing_imported_by_name": model_new(
        "return cuda_extension.scale_bias(x, self.scale, self.bias)",
        extra="from typing import get_type_hints\n"),
    # torch's own compiler: its kernels are not the candidate's (the guard saw eager ops under it; an
    # inductor build in the child failed on its read-only file system: neither is a rule)
    "torch_compiler_module": model_new("return self.f(x, self.scale, self.bias)",
                                       init="self.f = torch.compiler.compile(lambda x, s, b: x * s + b)"),
    "module_compile_method": model_new("return cuda_extension.scale_bias(x, self.scale, self.bias)",
                                       init="self.compile()"),
    # the interpreter's own objects: an async generator's frame holds the builtins (`eval`, `__import__`)
    "frame_builtins_of_an_async_generator": model_new(
        "return cuda_extension.scale_bias(x, self.scale, self.bias)",
        extra="async def reach():\n    yield 1\n\n\nimporter = reach().ag_frame.f_builtins['__import__']\n"),
    # torch's refused names under another name for torch
    "torch_imported_as_another_name": "import torch as t\n" + model_new(
        "return cuda_extension.scale_bias(x, self.scale, self.bias)", extra="hooks = t.utils.hooks\n"),
    "torch_reexported_by_a_torch_module": model_new(
        "return cuda_extension.scale_bias(x, self.scale, self.bias)",
        extra="aten = torch.nn.functional.torch.ops.aten\n"),
    "torch_kept_on_the_model": model_new("return self.t.ops.aten.addcmul(self.bias, x, self.scale)",
                                         init="self.t = torch"),
    # a class whose dunders are spelled as strings
    "class_made_by_type": model_new(
        "return cuda_extension.scale_bias(x, self.scale, self.bias)",
        extra="Finalizer = type('Finalizer', (), {'__del__': lambda self: None})\n"),
    # a module a torch module imported (logging.config instantiates any callable named in a dict)
    "module_held_by_a_torch_module": model_new(
        "return cuda_extension.scale_bias(x, self.scale, self.bias)",
        extra="log = torch.nn.parallel.distributed.dist.c10d_logger.logging\n"),
    # the import machinery, held by a torch module: find_spec("sys").loader.create_module(...) is sys
    "import_machinery_held_by_a_torch_module": model_new(
        "return cuda_extension.scale_bias(x, self.scale, self.bias)",
        extra="spec = torch.cuda.amp.common.find_spec('sys')\nsys_module = spec.loader.create_module(spec)\n"),
    # a file of the candidate's choosing, written by torch's own zip writer
    "file_written_by_torch": model_new(
        "return cuda_extension.scale_bias(x, self.scale, self.bias)",
        extra="writer = torch.PyTorchFileWriter('planted.zip')\n"),
    # a helper's method called with torch as its `self` (rewarded 3 on 2026-12-04): on `self.` the static rules
    # allowed private names, so `self._C` was torch._C, and its dispatch-mode stack held the compute guard
    "guard_popped_through_a_foreign_self": model_new(
        """
        c = Peek.grab(torch)
        mode = Peek.pop(c)
        out = x * self.scale + self.bias
        Peek.push(c, mode)
        return out
        """,
        extra="""
        class Peek:
            def grab(self):
                return self._C

            def pop(self):
                return self._pop_torch_dispatch_stack(None)

            def push(self, mode):
                return self._push_on_torch_dispatch_stack(mode)
        """,
    ),
    "value_read_in_forward": model_new(
        "return cuda_extension.scale_bias(x, self.scale, self.bias) if float(x.sum()) > -1e30 else x"),
}

# Red team, 2026-12-04 (night): native code the harness itself runs outside the candidate's call. An allocator
# that computes the next output while the harness allocates before the call, an operator observer doing the
# same, torch's own `mul` found through the dynamic linker's tables: each was rewarded 3 (a task on torch's
# inter-op pool, a thread with no thread symbol, 1).
PROCESS_HOOKS = {
    "allocator_hook": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include <c10/core/CPUAllocator.h>
        #include "../binding_registry.h"
        static struct Install { Install() { c10::SetCPUAllocator(c10::GetCPUAllocator(), 255); } } install;
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) { return torch::empty_like(x); }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
    "operator_observer": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include <ATen/record_function.h>
        #include "../binding_registry.h"
        static std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction&) { return nullptr; }
        static struct Install {
          Install() { at::addGlobalCallback(at::RecordFunctionCallback(&on_start)); }
        } install;
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) { return torch::empty_like(x); }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
    "interop_pool_task": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include <ATen/Parallel.h>
        #include "../binding_registry.h"
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) {
          auto out = torch::empty_like(x);
          at::launch([]() {});
          return out;
        }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
    "dynamic_linker_state": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include "../binding_registry.h"
        struct RDebug { int version; void* map; };
        extern "C" RDebug _r_debug;
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) {
          (void)_r_debug.map;
          return torch::empty_like(x);
        }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
}


@pytest.mark.parametrize("name", catalogued(PROCESS_HOOKS))
def test_hooking_the_process_is_refused(evaluate_cpu, name: str) -> None:
    result = evaluate_cpu(HONEST, textwrap.dedent(PROCESS_HOOKS[name]))
    assert result.status in (EvalStatus.VIOLATION, EvalStatus.STATIC_CHECK_FAILED) and result.reward == -1.0, result.error


@pytest.mark.parametrize("symbol", [
    "c10::SetCPUAllocator(c10::Allocator*, unsigned char)", "c10::SetAllocator(c10::DeviceType, c10::Allocator*, unsigned char)",
    "at::addGlobalCallback(at::RecordFunctionCallback)", "at::addThreadLocalCallback(at::RecordFunctionCallback)",
    "at::launch(std::function<void ()>)", "_r_debug", "getauxval", "_dl_find_object"])
def test_the_symbols_of_process_hooks_are_refused(symbol: str) -> None:
    """What the build's symbol check sees however the source spelled it (macros, another header's inline code)."""
    from cuda_agent.sandbox_pool.harness.policy import symbol_violations

    assert symbol_violations([symbol]), symbol
    assert not symbol_violations(["at::internal::invoke_parallel(long, long, long, std::function<void (long, long)> const&)"])


RED_TEAM_KERNELS = {
    "exclude_python_dispatch_key": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include "../binding_registry.h"
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) {
          c10::impl::ExcludeDispatchKeyGuard g(c10::DispatchKeySet(c10::DispatchKey::Python));
          return pybind11::cast(x).attr("mul")(s).attr("add")(b).cast<torch::Tensor>();
        }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
    "token_pasting": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include "../binding_registry.h"
        #define CAT(a, b) a##b
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) { return x; }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
    "pysys_modules": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include "../binding_registry.h"
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) { PyObject* m = PySys_GetObject("modules"); (void)m; return x; }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
    "phdr_symbol_scan": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include <link.h>
        #include "../binding_registry.h"
        static int cb(struct dl_phdr_info*, size_t, void*) { return 0; }
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) { dl_iterate_phdr(cb, nullptr); return x; }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
    "c11_thread": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include <threads.h>
        #include "../binding_registry.h"
        static int work(void*) { return 0; }
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) { thrd_t t; thrd_create(&t, work, nullptr); return x; }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
    "incbin_reads_worker_files": """
        #include <torch/types.h>
        #include <torch/csrc/utils/pybind.h>
        #include "../binding_registry.h"
        asm(".section .rodata\\n.global leaked\\nleaked: .incbin \\"/etc/hostname\\"\\n.previous");
        static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) { return x; }
        static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
        REGISTER_BINDING(f, reg);
    """,
}


@pytest.mark.parametrize("name", catalogued(RED_TEAM_MODEL_NEW))
def test_red_team_model_new_is_rejected(evaluate_cpu, name: str) -> None:
    result = evaluate_cpu(RED_TEAM_MODEL_NEW[name])
    assert result.reward == -1.0, (name, result.status, result.error)


def test_type_hints_of_every_kind_pass_the_static_check() -> None:
    from cuda_agent.sandbox_pool.harness.static_check import check_candidate

    source = "from __future__ import annotations\nfrom typing import List, Optional, Tuple\nimport typing\n" + model_new(
        "return cuda_extension.scale_bias(x, self.scale, self.bias)").replace(
        "def forward(self, x):", "def forward(self, x: 'torch.Tensor', y: Optional[List[int]] = None) -> torch.Tensor:")
    source += "\n\nPair = Tuple[torch.Tensor, typing.Optional[torch.Tensor]]\n"
    report = check_candidate({"model_new.py": source, "kernels/k.cpp": ""})
    assert report.ok, report.violations


def test_the_models_own_attributes_may_have_any_name() -> None:
    """Names refused on other objects (torch's, the interpreter's) are the model's own on `self.`."""
    from cuda_agent.sandbox_pool.harness.static_check import check_candidate

    source = model_new("return cuda_extension.scale_bias(x, self.f_scale, self.cache)",
                       init="self.f_scale = self.scale\nself.cache = self.bias\nself.ops = 3\nself.ref = None")
    report = check_candidate({"model_new.py": source, "kernels/k.cpp": ""})
    assert report.ok, report.violations


@pytest.mark.parametrize("name", catalogued(RED_TEAM_KERNELS))
def test_red_team_kernel_is_rejected(evaluate_cpu, name: str) -> None:
    result = evaluate_cpu(HONEST, textwrap.dedent(RED_TEAM_KERNELS[name]))
    assert result.reward == -1.0 and result.status is EvalStatus.VIOLATION, (name, result.status, result.error)


ROW_MEAN = '''
import torch
import torch.nn as nn


class Model(nn.Module):
    """Row means of a wide matrix: true outputs are far below atol = 1e-2."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        return x.mean(dim=1)


def get_inputs():
    return [torch.randn(64, 65536)]


def get_init_inputs():
    return []
'''

ZEROS_KERNEL = """
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include "../binding_registry.h"
static torch::Tensor row_mean(torch::Tensor x) {
  auto out = torch::empty({x.size(0)}, x.options());
  for (int64_t i = 0; i < x.size(0); ++i) out.data_ptr<float>()[i] = 0.0f;
  return out;
}
static void reg(pybind11::module& m) { m.def("row_mean", &row_mean); }
REGISTER_BINDING(row_mean, reg);
"""


def test_constant_output_does_not_pass_on_tiny_outputs(evaluate_cpu) -> None:
    src = HEADER + "class ModelNew(nn.Module):\n    def forward(self, x):\n        return cuda_extension.row_mean(x)\n"
    result = evaluate_cpu(src, ZEROS_KERNEL, problem=ROW_MEAN)
    assert result.status is EvalStatus.INCORRECT and result.reward == -1.0, result.error


LEGIT_ATEN_FROM_CPP = """
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include "../binding_registry.h"
// Legitimate glue: allocation with options, views, dtype casts and fills are not compute.
static torch::Tensor scale_bias(torch::Tensor x, torch::Tensor s, torch::Tensor b) {
  auto view = x.transpose(0, 1).select(0, 0).unsqueeze(0).squeeze(0);  // views only
  TORCH_CHECK(view.size(0) == x.size(0), "view");
  auto xt = x.contiguous().to(torch::kFloat32);
  auto out = torch::empty({xt.size(0), xt.size(1)}, xt.options());
  out.fill_(0.0f);
  const int64_t n = xt.size(0), d = xt.size(1);
  const float *px = xt.data_ptr<float>(), *ps = s.data_ptr<float>(), *pb = b.data_ptr<float>();
  float* po = out.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) po[i * d + j] = px[i * d + j] * ps[j] + pb[j];
  return out;
}
static void reg(pybind11::module& m) { m.def("scale_bias", &scale_bias); }
REGISTER_BINDING(scale_bias, reg);
"""


def test_legitimate_tensor_glue_in_cpp_is_accepted(evaluate_cpu) -> None:
    result = evaluate_cpu(HONEST, LEGIT_ATEN_FROM_CPP)
    assert result.correct, (result.status, result.error, result.violations)


# stale_memory / metric_gaming, red team 2026-12-04: one output buffer returned by every call skips the allocation and
# first touch that each call pays (5x on a 64 MB CPU output, reward 3) and overwrites the caller's earlier
# result; writing into the input, once the trials are over, is the same trick.
NOT_FRESH = {
    "one_buffer_for_every_call": model_new(
        """
        if self.buf is None or self.buf.shape != x.shape:
            self.buf = torch.empty_like(x)
        self.buf.copy_(x)
        return cuda_extension.scale_bias_inplace(self.buf, self.scale, self.bias)
        """,
        init="self.buf = None",
    ),
    # more buffers than the harness holds outputs (2): each one's last output is gone when it comes back
    "three_buffers_in_turn": model_new(
        """
        self.turn = (self.turn + 1) % 3
        buf = self.bufs[self.turn]
        if buf is None or buf.shape != x.shape:
            buf = torch.empty_like(x)
            self.bufs[self.turn] = buf
        buf.copy_(x)
        return cuda_extension.scale_bias_inplace(buf, self.scale, self.bias)
        """,
        init="self.bufs = [None, None, None]\nself.turn = 0",
    ),
    "into_the_input_once_timed": model_new(
        """
        self.calls += 1
        if self.calls > 8:  # the seven trials and the twin
            return cuda_extension.scale_bias_inplace(x, self.scale, self.bias)
        return cuda_extension.scale_bias(x, self.scale, self.bias)
        """,
        init="self.calls = 0",
    ),
}


@pytest.mark.parametrize("name", catalogued(NOT_FRESH))
def test_outputs_must_be_new_memory(evaluate_cpu, name: str) -> None:
    result = evaluate_cpu(NOT_FRESH[name], profile=True)
    assert result.status is EvalStatus.VIOLATION and result.reward == -1.0, (result.status, result.error)
    assert any("shares memory with" in v for v in result.violations), result.violations


@pytest.mark.parametrize("kernel", ["relu", "relu_positives_only"])
def test_a_large_output_left_partly_unwritten_shows_the_poison(evaluate_cpu, kernel: str) -> None:
    """stale_memory (uninitialised outputs) on a 64 MB CPU output: glibc gave it fresh zero pages (over its mmap
    threshold), so a relu that wrote only its positive elements passed before 2026-12-04 (late night). CPU
    children now keep the memory they free (child/heap.py) and the poisoned block comes back; the honest twin
    writes every element."""
    from pathlib import Path

    candidates = Path(__file__).parent / "candidates"
    files = {"model_new.py": HEADER + textwrap.dedent(f"""
                 class ModelNew(nn.Module):
                     def __init__(self):
                         super().__init__()

                     def forward(self, x):
                         return cuda_extension.{kernel}(x)
                 """),
             "kernels/k.cpp": (candidates / "relu_kernels.cpp").read_text()}
    result = evaluate_cpu("", files=files, problem=(candidates / "problem_big_relu.py").read_text())
    if kernel == "relu":
        assert result.correct, (result.status, result.error)
    else:
        assert result.status is EvalStatus.INCORRECT and result.reward == -1.0, (result.status, result.error)


@pytest.mark.parametrize("after_trials", ["out", "cuda_extension.relu_bf16(x)", "out.view(-1)"],
                         ids=["honest", "bf16_once_verified", "flattened_once_verified"])
def test_timed_outputs_keep_the_references_dtype_and_shape(evaluate_cpu, after_trials: str) -> None:
    """Red team, 2026-12-05: timed outputs were judged by their values at sampled positions only, so a relu that
    returned float32 for the 8 verification calls and bfloat16 from then on (half the bytes written, within rtol)
    went from reward 1 to 3. Every timed call's outputs must have the reference's dtypes and shapes
    (`compare.signature`), checked or not; the honest twin returns the same kernel's float32 on every call."""
    from pathlib import Path

    candidates = Path(__file__).parent / "candidates"
    trials = EvalOptions().correctness_trials + EvalOptions().influence_checks
    files = {"model_new.py": HEADER + textwrap.dedent(f"""
                 class ModelNew(nn.Module):
                     def __init__(self):
                         super().__init__()
                         self.calls = 0

                     def forward(self, x):
                         self.calls = self.calls + 1
                         out = cuda_extension.relu(x)
                         return out if self.calls <= {trials} else {after_trials}
                 """),
             "kernels/k.cpp": (candidates / "relu_kernels.cpp").read_text()}
    result = evaluate_cpu("", files=files, profile=True, problem=(candidates / "problem_big_relu.py").read_text())
    if after_trials == "out":
        assert result.status is EvalStatus.OK, (result.status, result.error)
    else:
        assert result.status is EvalStatus.VIOLATION and result.reward == -1.0, (result.status, result.error)
        assert "must keep the reference's dtypes and shapes" in (result.error or ""), result.error


def test_outputs_over_the_candidates_own_memory_are_refused(evaluate_cpu, monkeypatch) -> None:
    """Three static buffers in turn, each returned through torch::from_blob: no storage outlives its call, so the
    watch on earlier outputs cannot see the memory come back. Refused at the build (from_blob's symbol), and
    behind that at run time (on a CPU torch's allocator makes resizable storages, wrapped memory is not)."""
    from pathlib import Path

    from cuda_agent.sandbox_pool.harness import evaluator as evaluator_mod

    kernels = (Path(__file__).parent / "candidates" / "static_buffers.cpp").read_text()
    files = {"model_new.py": model_new("return cuda_extension.scale_bias_static(x, self.scale, self.bias)"),
             "kernels/k.cpp": kernels}
    refused = evaluate_cpu("", files=files, profile=True)
    assert refused.status is EvalStatus.VIOLATION and "from_blob" in (refused.error or ""), (refused.status, refused.error)

    async def no_symbol_check(objects):  # noqa: ANN001, ANN202
        return []

    monkeypatch.setattr(evaluator_mod, "check_object_symbols", no_symbol_check)
    behind = evaluate_cpu("", files=files, profile=True)
    assert behind.status is EvalStatus.VIOLATION and behind.reward == -1.0, (behind.status, behind.error)
    assert any("memory torch did not allocate" in v for v in behind.violations), behind.violations
