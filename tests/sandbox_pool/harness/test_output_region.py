"""Trial outputs travel through a sealed shared region: fast, and nothing the child does to it
can hurt the parent or change a verdict's meaning."""

from __future__ import annotations

import os
import textwrap

import pytest
import torch
from test_hacks import HONEST

from cuda_agent.sandbox_pool.harness import EvalStatus
from cuda_agent.sandbox_pool.harness.output_buffer import ALIGN, OutputRegion, attach, region_bytes
from cuda_agent.sandbox_pool.harness.outputs import OutputFormatError, OutputMismatch, read_outputs


@pytest.fixture
def region():
    made = OutputRegion()
    yield made
    made.close()


def _outputs():
    return [torch.randn(33, 7), torch.arange(5, dtype=torch.int64), 2.5, torch.tensor(True)]


def test_outputs_written_by_the_child_read_back_as_copies(region) -> None:
    outputs = _outputs()
    assert region.seal(region_bytes(outputs), pin=False) == region_bytes(outputs)
    child = attach(os.dup(region.fd), region.nbytes, pin=False)
    assert child is not None
    layout = child.write(outputs)
    assert layout is not None and all(e.get("shared") for e in layout if "dtype" in e)
    got = read_outputs("/nonexistent", layout, "cpu", region)
    assert torch.equal(got[0], outputs[0]) and torch.equal(got[1], outputs[1]) and got[2] == 2.5
    assert torch.equal(got[3], outputs[3])
    child.write([torch.zeros(33, 7), torch.zeros(5, dtype=torch.int64), 0.0, torch.tensor(False)])
    assert torch.equal(got[0], outputs[0]), "what the parent read is its own copy"
    child.close()


def test_the_region_is_sealed_against_shrinking_and_growing(region) -> None:
    region.seal(4096, pin=False)
    with pytest.raises(PermissionError):
        os.ftruncate(region.fd, 0)
    with pytest.raises(PermissionError):
        os.ftruncate(region.fd, 1 << 30)
    assert region.read(4096 - 8, 8).numel() == 8  # still mapped, still readable


def test_outputs_that_do_not_fit_fall_back_to_files(region) -> None:
    region.seal(ALIGN, pin=False)
    child = attach(os.dup(region.fd), region.nbytes, pin=False)
    assert child is not None and child.write([torch.zeros(1000)]) is None
    child.close()


def test_an_unsealed_or_resized_region_is_not_used() -> None:
    fd = os.memfd_create("unsealed", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, 4096)
        assert attach(fd, 4096, pin=False) is None  # not sealed: the child writes files
    finally:
        os.close(fd)


@pytest.mark.parametrize(("entry", "message"), [
    ({"dtype": "float32", "shape": [4], "offset": 4096, "nbytes": 16, "shared": True}, "disagrees"),
    ({"dtype": "float32", "shape": [4], "offset": -64, "nbytes": 16, "shared": True}, "disagrees"),
    ({"dtype": "float32", "shape": [4], "offset": 4, "nbytes": 16, "shared": True}, "multiple"),
    ({"dtype": "float32", "shape": [5], "offset": 0, "nbytes": 16, "shared": True}, "disagrees"),
    ({"dtype": "object", "shape": [4], "offset": 0, "nbytes": 16, "shared": True}, "unsupported"),
])
def test_a_forged_layout_is_a_format_error(region, entry, message) -> None:
    region.seal(4096, pin=False)
    with pytest.raises(OutputFormatError, match=message):
        read_outputs("/nonexistent", [entry], "cpu", region)


@pytest.mark.parametrize(("layout", "message"), [
    # ranges may overlap: the same bytes named 64 times would be copied 64 times over
    ([{"dtype": "float32", "shape": [4], "offset": 0, "nbytes": 16}] * 64, "expected 2 output tensor"),
    ([{"dtype": "float32", "shape": [2], "offset": 0, "nbytes": 8}, {"value": 2.5}], "output 0: shape mismatch"),
    ([{"dtype": "int32", "shape": [4], "offset": 0, "nbytes": 16}, {"value": 2.5}], "output 0: dtype mismatch"),
    ([{"value": 1.0}, {"value": 2.5}], "output 0: expected a torch.Tensor"),
    ([{"dtype": "float32", "shape": [4], "offset": 0, "nbytes": 16},
      {"dtype": "float32", "shape": [1], "offset": 16, "nbytes": 4}], "output 1: expected 2.5, got a tensor"),
])
def test_a_layout_of_other_outputs_than_the_references_is_wrong_and_not_read(layout, message) -> None:
    # The file does not exist: reading it would be a format error, so the verdict came before any read.
    with pytest.raises(OutputMismatch, match=message):
        read_outputs("/nonexistent", layout, "cpu", expected=[torch.zeros(4), 2.5])


@pytest.mark.parametrize("kind", ["fifo", "link"])
def test_an_output_file_the_child_made_special_is_a_format_error_not_a_wait(tmp_path, kind: str) -> None:
    """The child owns its work folder: a FIFO there made the parent's open() wait for a writer forever
    (before 2026-12-04), and a link could point anywhere."""
    import threading

    path = tmp_path / "out_0.bin"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        (tmp_path / "real.bin").write_bytes(b"\0" * 16)
        path.symlink_to(tmp_path / "real.bin")
    outcome: list[BaseException | None] = []

    def read() -> None:
        try:
            read_outputs(str(path), [{"dtype": "float32", "shape": [4], "offset": 0, "nbytes": 16}], "cpu")
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert outcome and isinstance(outcome[0], OutputFormatError), outcome


def test_a_shared_layout_without_a_region_is_a_format_error() -> None:
    entry = {"dtype": "float32", "shape": [4], "offset": 0, "nbytes": 16, "shared": True}
    with pytest.raises(OutputFormatError, match="does not have"):
        read_outputs("/nonexistent", [entry], "cpu", None)
    with pytest.raises(OutputFormatError, match="mixes"):
        read_outputs("/nonexistent", [entry, {"dtype": "float32", "shape": [4], "offset": 0, "nbytes": 16}],
                     "cpu", OutputRegion())


def test_an_evaluation_moves_its_trial_outputs_through_the_region(evaluate_cpu) -> None:
    result = evaluate_cpu(HONEST)
    assert result.status is EvalStatus.OK, result.error
    log = result.stages["verify"].log
    assert "through the shared region" in log and ", 0 through files" in log, log


# Host code of the kernel attacks every descriptor it has: shrink, grow, truncate to zero.
TAMPERING_KERNEL = textwrap.dedent("""
    #include <torch/types.h>
    #include <torch/csrc/utils/pybind.h>
    #include <unistd.h>
    #include "../binding_registry.h"
    static torch::Tensor f(torch::Tensor x, torch::Tensor s, torch::Tensor b) {
      for (int fd = 3; fd < 4096; ++fd) { (void)!ftruncate(fd, 0); (void)!ftruncate(fd, 1L << 32); }
      auto out = torch::empty_like(x);
      const int64_t n = x.size(0), d = x.size(1);
      const float *px = x.data_ptr<float>(), *ps = s.data_ptr<float>(), *pb = b.data_ptr<float>();
      float* po = out.data_ptr<float>();
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < d; ++j) po[i * d + j] = px[i * d + j] * ps[j] + pb[j];
      return out;
    }
    static void reg(pybind11::module& m) { m.def("scale_bias", &f); }
    REGISTER_BINDING(f, reg);
""")


def test_a_child_that_truncates_its_descriptors_cannot_hurt_the_parent(evaluate_cpu) -> None:
    """The parent maps the region: a shrink would kill it with SIGBUS. The seals refuse it, the
    parent lives, and the kernel's honest answer is judged as such."""
    result = evaluate_cpu(HONEST, TAMPERING_KERNEL)
    assert result.status is EvalStatus.OK, (result.status, result.error)
    assert ", 0 through files" in result.stages["verify"].log
    after = evaluate_cpu(HONEST)  # the evaluator (the parent) still serves
    assert after.status is EvalStatus.OK, after.error
