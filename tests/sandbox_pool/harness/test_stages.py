"""Each stage's outcome on good and bad input: a clear verdict, the process survives."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cuda_agent.sandbox_pool.harness import EvalStatus
from cuda_agent.sandbox_pool.harness.compare import compare_outputs
from cuda_agent.sandbox_pool.harness.outputs import OutputFormatError, read_outputs
from cuda_agent.sandbox_pool.harness.static_check import check_candidate

from test_hacks import HONEST, model_new

# Read directly: several test folders have a `conftest` module, so `from conftest import` is ambiguous.
PROBLEM = (Path(__file__).parent / "candidates" / "problem_scale_bias.py").read_text()


def test_honest_candidate_is_correct_and_timed(evaluate_cpu) -> None:
    result = evaluate_cpu(HONEST, profile=True)
    assert result.status is EvalStatus.OK, result.error
    assert result.correct and result.compiled
    assert result.reward in (1.0, 2.0, 3.0)
    assert result.runtime_us and result.eager_us and result.runtime_us > 0
    assert len(result.timings["candidate"].samples_us) == 5
    assert result.receipt.seed == 7 and result.receipt.problem_sha256


def test_legitimate_views_and_allocation_in_python_are_allowed(evaluate_cpu) -> None:
    src = model_new(
        """
        flat = x.contiguous().view(-1, x.shape[-1])
        out = cuda_extension.scale_bias(flat, self.scale, self.bias)
        return out.view(x.shape).clone()
        """
    )
    result = evaluate_cpu(src)
    assert result.correct, result.error


@pytest.mark.parametrize(
    ("forward", "status", "says"),
    [
        ("return cuda_extension.segfault(x)", EvalStatus.CRASH, "died"),
        ("return cuda_extension.hog(x)", EvalStatus.CRASH, ""),
        ("return cuda_extension.scale_bias(x, self.scale, self.bias)[:, :10]", EvalStatus.INCORRECT, "shape mismatch"),
        ("return cuda_extension.scale_bias(x, self.scale, self.bias).double()", EvalStatus.INCORRECT, "dtype mismatch"),
        ("return cuda_extension.scale_bias(x, self.scale, self.bias) * float('nan')", EvalStatus.VIOLATION, ""),
        ("raise ValueError('boom')", EvalStatus.CRASH, "boom"),
    ],
)
def test_bad_candidates_get_a_clear_verdict(evaluate_cpu, forward: str, status: EvalStatus, says: str) -> None:
    result = evaluate_cpu(model_new(forward))
    assert result.status is status, (result.status, result.error)
    assert result.reward == -1.0 and result.error and says in result.error, result.error


def test_endless_kernel_times_out(evaluate_cpu) -> None:
    result = evaluate_cpu(model_new("return cuda_extension.spin(x)"), run_timeout_s=20)
    assert result.status is EvalStatus.TIMEOUT and result.reward == -1.0


def test_compile_error_is_reported_concisely(evaluate_cpu) -> None:
    result = evaluate_cpu(HONEST, "#include <torch/types.h>\nint broken( { }\n")
    assert result.status is EvalStatus.COMPILE_ERROR and result.compiled is False
    assert "kernels/k.cpp" in result.stages["compile"].log
    assert "In file included from" not in result.stages["compile"].log


def test_missing_model_new_and_syntax_errors(evaluate_cpu) -> None:
    assert evaluate_cpu("", files={"kernels/k.cpp": "int x;"}).status is EvalStatus.STATIC_CHECK_FAILED
    assert evaluate_cpu("def (:\n").status is EvalStatus.STATIC_CHECK_FAILED
    assert evaluate_cpu("import torch\nclass Other: pass\n").status is EvalStatus.STATIC_CHECK_FAILED


def test_infrastructure_failure_is_not_scored(evaluate_cpu) -> None:
    result = evaluate_cpu(HONEST, problem="this is not python(")
    assert result.status is EvalStatus.INFRA_ERROR
    assert result.reward is None and result.is_infra_failure


def test_static_check_allows_the_skill_contract() -> None:
    assert check_candidate({"model_new.py": HONEST, "kernels/a.cu": "__global__ void k(){}"}).ok


def test_compare_semantics() -> None:
    import torch

    ref = [torch.tensor([1.0, float("nan"), 100.0])]
    assert compare_outputs([torch.tensor([1.005, float("nan"), 100.9])], ref, 1e-2, 1e-2) is None
    assert compare_outputs([torch.tensor([1.05, float("nan"), 100.0])], ref, 1e-2, 1e-2)
    assert "dtype" in compare_outputs([ref[0].double()], ref, 1e-2, 1e-2)
    # Python scalars: a NaN matched any number, and None (a layout's value may be null) raised in the parent
    assert compare_outputs([2.504], [2.5], 1e-2, 1e-2) is None and compare_outputs([None], [None], 1e-2, 1e-2) is None
    assert "got nan" in compare_outputs([float("nan")], [2.5], 1e-2, 1e-2)
    assert "got None" in compare_outputs([None], [2.5], 1e-2, 1e-2)
    assert "got a tensor" in compare_outputs([torch.ones(2)], [2.5], 1e-2, 1e-2)


def test_compiler_environment_is_minimal(monkeypatch, tmp_path) -> None:
    from cuda_agent.sandbox_pool.harness.compiler.builder import _compiler_env

    monkeypatch.setenv("SECRET_API_TOKEN", "do-not-leak")
    env = _compiler_env(tmp_path)
    assert "SECRET_API_TOKEN" not in env
    assert env["HOME"] == str(tmp_path) and "PATH" in env


def test_irreproducible_inputs_are_the_problems_fault(evaluate_cpu) -> None:
    # The child draws its own inputs from the parent's seeds; a get_inputs() that ignores
    # the seeds makes verification meaningless and must not be blamed on the candidate.
    problem = PROBLEM.replace("def get_inputs():", "import os as _os\n\ndef get_inputs():\n    torch.manual_seed(int.from_bytes(_os.urandom(4), 'little'))")
    result = evaluate_cpu(HONEST, problem=problem)
    assert result.status is EvalStatus.INFRA_ERROR and result.reward is None
    assert "reproducible" in (result.error or "")


@pytest.mark.parametrize("layout", [
    None,
    [{"dtype": "object", "shape": [2], "offset": 0, "nbytes": 16}],
    [{"dtype": "float32", "shape": [4], "offset": 0, "nbytes": 8}],
    [{"dtype": "float32", "shape": [4], "offset": 8, "nbytes": 16}],
    [{"dtype": "float32", "shape": [-4], "offset": 0, "nbytes": 16}],
    [{"dtype": "float32", "shape": [4], "offset": 0, "nbytes": 16, "extra": 1}],
])
def test_malformed_output_layouts_are_rejected(tmp_path, layout) -> None:
    path = tmp_path / "out_0.bin"
    path.write_bytes(bytes(16))
    with pytest.raises(OutputFormatError):
        read_outputs(str(path), layout, "cpu")


def test_raw_outputs_round_trip(tmp_path) -> None:
    values = [torch.arange(6, dtype=torch.bfloat16).reshape(2, 3), torch.tensor([True, False]), 3.5]
    blob, layout, offset = b"", [], 0
    for v in values:
        if isinstance(v, torch.Tensor):
            raw = v.reshape(-1).view(torch.uint8).numpy().tobytes()
            layout.append({"dtype": str(v.dtype).removeprefix("torch."), "shape": list(v.shape), "offset": offset,
                           "nbytes": len(raw)})
            blob, offset = blob + raw, offset + len(raw)
        else:
            layout.append({"value": v})
    (tmp_path / "o.bin").write_bytes(blob)
    got = read_outputs(str(tmp_path / "o.bin"), layout, "cpu")
    assert torch.equal(got[0], values[0]) and torch.equal(got[1], values[1]) and got[2] == 3.5


def test_draws_are_reproducible_while_other_threads_draw() -> None:
    # Workers of one pool share a process: a parent's draw must not be disturbed by another
    # worker seeding the global generators at the same time (its child redraws alone).
    import threading

    from cuda_agent.sandbox_pool.harness.inputs import draw

    def get_inputs():
        return [torch.randn(64, 256), torch.rand(256)]

    expected = {seed: draw(get_inputs, seed, "heavy_tailed") for seed in range(40)}
    mismatches: list[int] = []

    def worker(offset: int) -> None:
        for i in range(40):
            seed = (i + offset) % 40
            got = draw(get_inputs, seed, "heavy_tailed")
            if not all(torch.equal(a, b) for a, b in zip(got, expected[seed])):
                mismatches.append(seed)

    threads = [threading.Thread(target=worker, args=(k * 10,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not mismatches


def test_the_child_never_holds_the_positions_of_timed_checks_in_advance(evaluate_cpu) -> None:
    # Timed outputs are checked at positions revealed one call at a time, after that call
    # returned: nothing in the child's spec (or its memory) says where the next check looks.
    from cuda_agent.sandbox_pool.harness.protocol import ChildSpec

    assert not any("print" in name or "fingerprint" in name for name in ChildSpec.model_fields)
    result = evaluate_cpu(HONEST, profile=True, timed_calls=7)
    assert result.status is EvalStatus.OK, result.error
    assert len(result.timings["candidate"].samples_us) == 7
