"""What a candidate may use. One place for every allow/deny list of the harness.

The rule (docs/harness.md, "What is checked"): the candidate's forward may create tensors, take views, copy and
cast; every computation must happen in the compiled extension. These lists implement that
rule at three levels: the dispatcher (`ALLOWED_ATEN_OPS`), the built module's imported
symbols, and the sources.
"""

from __future__ import annotations

import functools
import re
import sys

from cuda_agent.sandbox_pool.harness.defences.catalogue import owning_reason

ALLOWED_ATEN_OPS: frozenset[str] = frozenset(
    {
        # creation
        "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
        "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "scalar_tensor",
        "lift_fresh", "lift_fresh_copy", "arange",
        # views and metadata
        "view", "_unsafe_view", "reshape", "_reshape_alias", "as_strided", "t", "transpose", "permute",
        "expand", "unsqueeze", "squeeze", "flatten", "unflatten", "slice", "select", "narrow", "split",
        "split_with_sizes", "chunk", "unbind", "alias", "detach", "view_as", "diagonal", "movedim",
        "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_contiguous",
        "record_stream", "set_", "resize_", "is_same_size", "is_nonzero",
        # copies and casts
        "contiguous", "clone", "copy_", "_to_copy", "to", "fill_", "zero_",
    }
)
"""aten operator names (overload packets) allowed during the candidate's forward."""

ALLOWED_IMPORTS: frozenset[str] = frozenset(
    {"torch", "torch.nn", "torch.nn.functional", "math", "typing", "cuda_extension", "__future__"}
)
"""Modules model_new.py may import (anything else lets the candidate reach the harness)."""

FORBIDDEN_ATTRIBUTES: frozenset[str] = frozenset(
    {
        # modules that allowed modules re-export (torch.sys, typing.sys, F.torch.os, ...)
        "sys", "os", "builtins", "inspect", "gc", "ctypes", "importlib", "subprocess", "threading",
        "multiprocessing", "signal", "socket", "io", "pathlib", "shutil", "tempfile", "pickle", "marshal",
        "types", "weakref", "warnings", "atexit", "traceback", "linecache", "dataclasses", "functools",
        "collections", "abc", "contextlib", "operator", "itertools", "time", "random", "numpy", "np", "secrets",
        # ... and the names under which torch's own modules hold other modules (test_model_new_reach.py walks
        # every chain the static check allows and fails on a module outside torch, math and typing)
        "logging", "copy", "copyreg", "enum", "re", "stdlib_re", "glob", "hashlib", "numbers", "platform",
        "textwrap", "concurrent", "mp", "dist", "pynvml", "amdsmi",  # pynvml: torch.cuda's, on CUDA builds
        "typing_extensions",
        "cpp", "return_types",  # torch._C's modules
        # leaving torch for Python-level or numpy compute
        "tolist", "item", "from_numpy", "frombuffer", "from_dlpack", "to_dlpack", "__array__",
        "storage", "untyped_storage", "data_ptr",
        # frames, code and namespaces
        "modules", "f_back", "f_locals", "f_globals", "f_code", "currentframe", "getframe", "_getframe",
        "gi_frame", "cr_frame", "tb_frame", "co_code",
        # RNG state (the seeds are the evaluation's)
        "initial_seed", "seed", "manual_seed", "get_rng_state", "set_rng_state", "default_generator", "Generator",
        # files and deserialisation (torch.serialization.load(weights_only=False) unpickles: arbitrary code),
        # allocators that load a library of their own
        "serialization", "from_file", "CUDAPluggableAllocator", "change_current_allocator", "MemPool",
        "use_mem_pool",
        # library functions that evaluate strings: an annotation "__import__('sys')" read by
        # typing.get_type_hints is `eval` by another name (the static check never sees the string's names)
        "get_type_hints", "ForwardRef", "evaluate_forward_ref", "get_annotations", "annotationlib",
        # torch's own compiler (nn.Module.compile, torch.compiler.compile): kernels that are not the candidate's
        "compile",
    }
)
"""Attribute names model_new.py may not use on any object."""

FORBIDDEN_TORCH_ATTRS: frozenset[str] = frozenset(
    {"utils", "library", "ops", "overrides", "autograd", "compile", "jit", "fx", "backends", "profiler",
     "Event", "Stream", "_C", "_dynamo", "_inductor", "multiprocessing", "distributed", "hub", "load", "save",
     "set_default_dtype", "set_default_device", "manual_seed", "seed", "random", "set_grad_enabled",
     "use_deterministic_algorithms", "testing", "export", "func", "vmap", "classes", "package", "compiler",
     "ExternalStream", "set_sync_debug_mode",
     # functions of other modules that torch's modules hold (test_model_new_reach.py lists them all):
     # ctypes (memory by address), the import machinery (find_spec(...).loader.create_module gave `sys`),
     # weak references (callbacks), caches across calls, introspection, class builders
     "byref", "pointer", "cast", "c_void_p", "c_double", "c_uint32", "find_spec", "signature", "dataclass",
     "ref", "cache", "lru_cache",
     # torch's own file readers and writers, library and IR loaders, allocator and GEMM-tuning controls
     "PyTorchFileReader", "PyTorchFileWriter", "import_ir_module", "import_ir_module_from_buffer", "gds",
     "GdsFile", "load_metallib", "XPUPluggableAllocator", "caching_allocator_alloc", "caching_allocator_delete",
     "tunable", "onnx"}
)
"""torch's names model_new.py may not touch (timers, dispatch internals, compilers, RNG), on any object but the
model itself (`self.ops` is the model's own): torch is reachable under other names."""

def _interpreter_attributes() -> frozenset[str]:
    """The attributes of this interpreter's frames, generators, async generators, coroutines, code objects and
    tracebacks (`f_builtins`, `ag_frame`, `co_consts`, `tb_next`, ...), read from live ones."""

    def generator():  # noqa: ANN202
        yield

    async def agen():  # noqa: ANN202
        yield

    async def coro() -> None:
        pass

    try:
        raise RuntimeError
    except RuntimeError as exc:
        tb = exc.__traceback__
    samples = [sys._getframe(), generator(), agen(), coro(), generator.__code__, tb]
    names = {n for obj in samples for n in dir(obj) if n.startswith(("f_", "gi_", "ag_", "cr_", "co_", "tb_"))}
    samples[3].close()  # the coroutine, never awaited
    return frozenset(names)


INTERPRETER_ATTRIBUTES: frozenset[str] = _interpreter_attributes()
"""Refused on any object but the model itself: a frame's `f_builtins` holds `eval` and `__import__` (an async
generator's `ag_frame` gave it to model_new.py), a generator's code can be rewritten into any other."""

FORBIDDEN_BUILTINS: frozenset[str] = frozenset(
    {"__import__", "eval", "exec", "compile", "open", "globals", "locals", "vars", "getattr", "setattr",
     "delattr", "breakpoint", "input", "memoryview", "__builtins__", "exit", "quit", "help", "id",
     "type"}  # type(name, bases, namespace) makes classes with dunders spelled as strings; type(f) is FunctionType
)
"""Builtins model_new.py may not call or name."""

ALLOWED_DUNDERS: frozenset[str] = frozenset({"__init__", "__name__", "__future__"})

FORBIDDEN_SOURCE_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), why)
    for p, why in (
        (r"\bdlopen\b|\bdlsym\b", "dynamic loading"),
        (r"\bPyRun_|\bPyImport_|\bPyEval_|\bPy_CompileString|\bPyMarshal_", "Python C API execution"),
        (r"(?:py|pybind11)::(?:module_?|module)::import|py::eval|py::exec|pybind11::eval|pybind11::exec", "importing Python from C++"),
        (r"__import__|__builtins__", "reaching Python builtins from C++"),
        (r"\bsystem\s*\(|\bpopen\s*\(|\bfork\s*\(|\bvfork\s*\(|\bexecv|\bexecl|\bposix_spawn", "starting processes"),
        (r"std::thread|std::async|pthread_create", "threads outside OpenMP"),
        # taking the Python lock from kernel code: how a team left running holds the harness's thread until it is
        # done (red team, 2026-12-05). Spelt otherwise (an `asm` label), the symbol rules below still see them.
        (r"gil_scoped_acquire|GOMP_|_PyRuntime", "taking the Python lock or OpenMP's internals from kernel code"),
        (r"\bat::native::|at::cuda::blas|at::_ops::|redispatch|c10::Dispatcher|torch::jit|TORCH_LIBRARY", "calling torch's own kernels"),
        (r"\bsocket\s*\(|\bconnect\s*\(", "network access"),
        (r"ptrace|/proc/", "inspecting other processes"),
        (r"cudaStreamCreate|cuStreamCreate|cudaStreamNonBlocking", "creating streams (launch on the current stream)"),
        (r"##", "token pasting (identifiers must be spelled out)"),
        (r"DispatchKey|ExcludeDispatchKeyGuard|IncludeDispatchKeyGuard|tls_set_dispatch", "dispatcher state"),
        (r"\bPy[A-Z][A-Za-z]*_[A-Za-z]", "the Python C API (bindings use pybind11's m.def only)"),
        (r"\.attr\s*\(|getattr|hasattr|setattr|reinterpret_borrow|reinterpret_steal|py::globals|pybind11::globals"
         r"|py::module_?::|pybind11::module_?::|py::dict|py::object", "reaching Python objects from C++"),
        (r"dl_iterate_phdr|\bdladdr\b|\bdlvsym\b|\bdlinfo\b|link\.h|\b_r_debug\b|\b_dl_|\bgetauxval\b|\blink_map\b",
         "inspecting loaded libraries"),
        (r"SetCPUAllocator|SetAllocator|add(?:Global|ThreadLocal)Callback|RecordFunction|\bat::launch\b|intraop_launch",
         "hooking torch's process-wide machinery (allocators, operator callbacks, thread pools)"),
        # `x.clone()` and `torch::clone(x)` copy a tensor; libc's clone is also refused by symbol.
        (r"\bsyscall\s*\(|thrd_create|timer_create|(?<![.>])(?<!at::)(?<!torch::)\bclone\s*\(",
         "raw system calls, threads or timers"),
        (r"incbin|\bfopen\b|\bifstream\b|\bofstream\b|\bfstream\b|\bopenat?\s*\(", "reading or writing files"),
        (r"cudaCtxResetPersistingL2Cache|cudaStreamAttrValue|accessPolicyWindow|cudaLimitPersistingL2CacheSize", "L2 persistence control"),
    )
)
"""Patterns refused in kernels/* sources, with the reason shown to the model."""

_ATEN_CALL = re.compile(r"at::_ops::([A-Za-z0-9_]+)::(call|redispatch)\b")
FORBIDDEN_SYMBOL_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), why)
    for p, why in (
        (r"^at::native::|^at::cpu::|^at::cuda::blas::|^at::meta::|^at::compositeexplicitautograd", "torch kernel entry point"),
        (r"^dlopen|^dlsym|^dlmopen", "dynamic loading"),
        (r"^PyRun_|^PyImport_|^PyEval_EvalCode|^Py_CompileString|^PyEval_GetGlobals|^PyEval_GetLocals|^PyEval_GetFrame", "Python execution"),
        (r"^system$|^popen$|^fork$|^vfork$|^execv|^execl|^posix_spawn|^pthread_create$", "process or thread creation"),
        (r"^socket$|^connect$", "network access"),
        (r"^ptrace$|^process_vm_", "inspecting other processes"),
        (r"^c10::Dispatcher::|^torch::jit::", "torch dispatcher internals"),
        (r"^cudaCtxResetPersistingL2Cache$|^cuCtxResetPersistingL2Cache", "L2 persistence control"),
        (r"^cudaStreamCreate|^cuStreamCreate", "stream creation (launch on the current stream)"),
        (r"^PySys_|^PyModule_GetDict$|^PyImport", "reaching Python internals"),
        # the dynamic linker's own state (`_r_debug` -> link_map -> every library's symbol and relocation tables)
        # is a hand-made dlsym, and its tables lead to writable function-pointer slots (red team, 2026-12-04)
        (r"^dl_iterate_phdr$|^dladdr|^dlvsym$|^dlinfo$|^_r_debug$|^_dl_|^getauxval$|^__libc_stack_end$",
         "inspecting loaded libraries"),
        # code the harness itself would run outside the candidate's call (an allocator that computes the next
        # output while the harness allocates, an operator observer, a task on torch's inter-op pool): each
        # was rewarded 3 by the red team of 2026-12-04
        (r"^c10::SetCPUAllocator|^c10::SetAllocator|^at::addGlobalCallback|^at::addThreadLocalCallback"
         r"|^at::RecordFunction|^at::clearCallbacks|^at::removeCallback|^at::launch\(|^at::intraop_launch"
         r"|^c10::ThreadPool|^at::set_num_(interop_)?threads",
         "hooking torch's process-wide machinery (allocators, operator callbacks, thread pools)"),
        # an output over memory the candidate keeps (static buffers in turn) skips the allocation and first touch
        # each call pays, and outlives the harness's watch on earlier outputs (child/main.py `check_fresh`)
        (r"^at::TensorMaker::|^at::for_blob|^at::from_blob|^torch::from_blob",
         "wrapping memory torch did not allocate (from_blob): allocate outputs and workspaces with torch::empty"),
        (r"^syscall$|^thrd_create$|^timer_create$|^clone3?$|^mmap|^mprotect$", "raw system calls, threads, timers or memory maps"),
        (r"^fopen|^open$|^open64$|^openat|^creat$|^std::basic_[io]?fstream|^std::basic_filebuf", "reading or writing files"),
        (r"tls_set_dispatch_key|^c10::impl::tls_", "dispatcher state"),
        # OpenMP's legacy interface starts a team that the caller joins only when it chooses: work left running
        # after the call returns, outside the timed window (red team, 2026-12-05: reward 3 for a relu whose team
        # wrote the output while the harness waited on the Python lock). `#pragma omp parallel` joins before
        # returning (GOMP_parallel, GOMP_parallel_loop_*).
        (r"^GOMP_parallel_start$|^GOMP_parallel_end$|^GOMP_parallel_(loop_\w+|sections)_start$|^GOACC_",
         "OpenMP teams left running after the call (write `#pragma omp parallel`, which joins before returning)"),
        # CPython's private runtime state (the lock's own fields, the switch interval): never a kernel's business;
        # the public GIL functions stay, pybind11's own code calls them.
        (r"^_PyRuntime$|^_PyEval_|^_PyGILState_",
         "reaching Python's private runtime state"),
        # The child's pipe to the parent and the outside clock's socket are descriptors of the candidate's
        # process: reading, writing, duplicating or closing a descriptor is how forged messages are sent.
        (r"^(__libc_|__)?(write|writev|pwrite(64)?|pwritev2?|send|sendto|sendmsg|sendmmsg|read|readv|pread(64)?"
         r"|preadv2?|recv|recvfrom|recvmsg|recvmmsg|close|close_range|closefrom|shutdown|dup[23]?|fcntl(64)?"
         r"|ioctl|socketpair|pipe2?|splice|tee|vmsplice|sendfile(64)?|copy_file_range|getsockopt|setsockopt"
         r"|getsockname|getpeername|fdopen|dprintf|vdprintf|freopen(64)?|prctl)(_nocancel)?$"
         r"|^io_uring_|^epoll_|__gnu_cxx::stdio_(sync_)?filebuf|^std::__basic_file", "file descriptor I/O"),
    )
)


@functools.lru_cache(maxsize=1)
def allowed_op_structs() -> frozenset[str]:
    """C++ names (`at::_ops::<name>`) of every overload of the allowed operators.

    An overload's struct is `<op>` for the default overload and `<op>_<overload>` otherwise
    (e.g. `empty_memory_format`, `transpose_int`), read from torch's own registry.
    """
    import torch

    names = set(ALLOWED_ATEN_OPS)
    for op in ALLOWED_ATEN_OPS:
        packet = getattr(torch.ops.aten, op, None)
        if packet is None:
            continue
        for overload in packet.overloads():
            names.add(op if overload == "default" else f"{op}_{overload}")
    return frozenset(names)


def symbol_violations(symbols: list[str]) -> list[str]:
    """Violations among the (demangled) undefined symbols of a built module, each naming its defence."""
    found: list[str] = []
    allowed = allowed_op_structs()
    for sym in symbols:
        match = _ATEN_CALL.search(sym)
        if match and (match.group(2) == "redispatch" or match.group(1) not in allowed):
            found.append(f"the extension calls torch operator at::{match.group(1)} (compute must be in your kernels) "
                         "[defence torch_fallback]")
            continue
        for pattern, why in FORBIDDEN_SYMBOL_PATTERNS:
            if pattern.search(sym):
                found.append(f"the extension imports {sym.split('(')[0]} ({why}){defence_tag(why)}")
                break
    return sorted(set(found))


def defence_tag(why: str) -> str:
    """' [defence <id>]' for a pattern's reason, read from the catalogue of defences (docs/defences.md)."""
    defence = owning_reason(why)
    return f" [defence {defence.id}]" if defence is not None else ""
