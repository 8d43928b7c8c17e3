"""Issue 36: the device running out of memory outside the candidate's code (the problem's inputs drawn in an
evaluation child) is never the job's verdict: the evaluator counts more memory for the task and tries again,
and fails the job as ``infra_error`` naming device memory only when it ran out alone."""

from __future__ import annotations

import os
from pathlib import Path

from cuda_agent.sandbox_pool.harness import EvalStatus

from test_hacks import HONEST, model_new

SCALE_BIAS = (Path(__file__).parent / "candidates" / "problem_scale_bias.py").read_text()
OUT_OF_MEMORY_DRAWS = '''
import os

PARENT_PID = {parent}
ARMED = {armed!r}
_draw = get_inputs


def get_inputs():
    # in an evaluation child, one byte of the test's FIFO per draw that runs out of memory (the child's file
    # system is read-only; reading a FIFO consumes it): as if the device were full of other evaluations' tensors
    if os.getpid() != PARENT_PID:
        fd = os.open(ARMED, os.O_RDONLY | os.O_NONBLOCK)
        try:
            token = os.read(fd, 1)
        except BlockingIOError:
            token = b""
        finally:
            os.close(fd)
        if token:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 512.00 MiB (the test's)")
    return _draw()
'''
"""Appended to the scale-and-bias problem the HONEST candidate solves: its get_inputs, wrapped."""


class OutOfMemoryDraws:
    """The FIFO the problem reads a byte of per draw that runs out of memory; kept open for writing, so that an
    empty one reads as no byte rather than as its end."""

    def __init__(self, tmp_path: Path) -> None:
        self.path = tmp_path / "armed"
        os.mkfifo(self.path)
        self.fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
        self.problem = SCALE_BIAS + OUT_OF_MEMORY_DRAWS.format(parent=os.getpid(), armed=str(self.path))

    def arm(self, draws: int) -> None:
        os.write(self.fd, b"x" * draws)

    def left(self) -> int:
        try:
            return len(os.read(self.fd, 4096))
        except BlockingIOError:
            return 0


def test_an_out_of_memory_drawing_the_inputs_waits_and_tries_again(evaluate_cpu, tmp_path: Path) -> None:
    draws = OutOfMemoryDraws(tmp_path)
    assert evaluate_cpu(HONEST, problem=draws.problem).status is EvalStatus.OK  # baselines cached, nothing armed
    draws.arm(1)
    result = evaluate_cpu(HONEST, problem=draws.problem)
    assert draws.left() == 0, "the child's draw never ran out of memory: the test proves nothing"
    assert result.status is EvalStatus.OK and result.correct, result.error
    assert "out of device memory while sharing the device" in result.stages["device"].log
    assert "the test's" in result.stages["device"].log  # what ran out, for whoever reads the result


def test_an_evaluation_that_runs_out_alone_is_an_infra_error_naming_device_memory(evaluate_cpu, tmp_path: Path) -> None:
    draws = OutOfMemoryDraws(tmp_path)
    assert evaluate_cpu(HONEST, problem=draws.problem).status is EvalStatus.OK
    draws.arm(100)
    result = evaluate_cpu(HONEST, problem=draws.problem)
    assert result.status is EvalStatus.INFRA_ERROR
    assert result.error.startswith("out of device memory, alone on the device"), result.error
    assert "re-run solo" in result.stages["device"].log
    assert "(before: out of device memory while sharing the device" in result.error  # what the pool tried


def test_a_candidate_raising_out_of_memory_gets_its_own_verdict(evaluate_cpu) -> None:
    """Only the problem's draws and the child's start are the device's: a candidate that raises out-of-memory
    (to dodge a wrong answer's verdict as infra_error, which training excludes) crashes."""
    raising = model_new('raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 512.00 MiB")')
    result = evaluate_cpu(raising)
    assert result.status is EvalStatus.CRASH, (result.status, result.error)
