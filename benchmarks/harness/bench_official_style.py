"""A straightforward baseline of the official approach, for comparison with bench_eval.py.

One process; every evaluation recompiles the extension with torch.utils.cpp_extension.load
(no cache), verifies on 5 inputs in the same process, and times the reference eagerly and
under a freshly run torch.compile, then the candidate, with CUDA events (as the official
agent_workdir scripts do). Usage: python benchmarks/harness/bench_official_style.py [--repeats 2]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "sandbox_pool/workspace/templates"


def _time(fn, inputs, iters: int = 30) -> float:
    for _ in range(3):
        fn(*inputs)
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*inputs)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return sorted(times)[len(times) // 2]


def evaluate_once(problem_path: Path, solution: Path) -> dict:
    import torch.utils.cpp_extension as cpp_ext

    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="official_style_"))
    shutil.copy(TEMPLATES / "binding.cpp", work)
    shutil.copy(TEMPLATES / "binding_registry.h", work)
    shutil.copytree(solution / "kernels", work / "kernels")
    sources = [str(work / "binding.cpp")] + [str(p) for p in (work / "kernels").iterdir() if p.suffix in (".cu", ".cpp")]
    ext = cpp_ext.load(name="cuda_extension", sources=sources, build_directory=str(work), verbose=False,
                       extra_cflags=["-O3"], extra_cuda_cflags=["-O3"], extra_include_paths=[str(work)])
    sys.modules["cuda_extension"] = ext
    t_compile = time.monotonic() - t0
    ref_mod, new_mod = types.ModuleType("model"), types.ModuleType("model_new")
    exec(problem_path.read_text(), ref_mod.__dict__)
    exec((solution / "model_new.py").read_text(), new_mod.__dict__)
    t1 = time.monotonic()
    torch.manual_seed(0)
    ref = ref_mod.Model(*ref_mod.get_init_inputs()).cuda()
    new = new_mod.ModelNew(*ref_mod.get_init_inputs()).cuda()
    ok = True
    with torch.no_grad():
        for trial in range(5):
            torch.manual_seed(trial)
            inputs = [x.cuda() for x in ref_mod.get_inputs()]
            ok &= torch.allclose(ref(*inputs), new(*inputs), atol=1e-2, rtol=1e-2)
        t_verify = time.monotonic() - t1
        t2 = time.monotonic()
        inputs = [x.cuda() for x in ref_mod.get_inputs()]
        eager = _time(ref, inputs)
        compiled_model = torch.compile(ref)
        compiled = _time(compiled_model, inputs)
        cand = _time(new, inputs)
    t_profile = time.monotonic() - t2
    torch._dynamo.reset()
    shutil.rmtree(work, ignore_errors=True)
    return {"compile_s": round(t_compile, 2), "verify_s": round(t_verify, 2), "profile_s": round(t_profile, 2),
            "total_s": round(time.monotonic() - t0, 2), "correct": bool(ok), "runtime_us": cand,
            "eager_us": eager, "torch_compile_us": compiled}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    problem = ROOT / "examples/problems/diag_matmul_cuda.py"
    for _ in range(args.repeats):
        print(json.dumps(evaluate_once(problem, ROOT / "examples/solutions/diag_matmul/cuda_fast")))
