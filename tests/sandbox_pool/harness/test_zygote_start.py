"""The forkserver's start: ready before its CUDA probe ends; the probe's outcome before the first child.

And the one-shot path's CUDA primer: torch-free, never raises.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.harness.child.hardening import LEVELS
from cuda_agent.sandbox_pool.harness.cuda_primer import prime_cuda_context
from cuda_agent.sandbox_pool.harness.protocol import ChildSpec
from cuda_agent.sandbox_pool.harness.runner import ChildProcess, Zygote

ROOT = Path(__file__).resolve().parents[3]
PROBLEM = (ROOT / "examples/problems/diag_matmul.py").read_text()


def test_a_cuda_zygote_is_ready_before_its_probe_and_names_the_level_before_its_first_child(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # On a machine without a GPU every level's probe fails ("none"); with one, a level of LEVELS works.
    zygote = Zygote(cuda=True)
    try:
        zygote.start()
        assert zygote.level == "" and zygote.probe == {}  # pending: the ready message does not wait for it
        assert "torch_import_s" in zygote.boot and "probe_s" not in zygote.boot
        spec = ChildSpec(role="reference", device="cuda", work_dir=str(tmp_path), problem_src=PROBLEM, isolate=False)
        with caplog.at_level(logging.INFO, logger="cuda_agent.sandbox_pool.harness.runner"):
            child = ChildProcess(zygote, spec)
        assert child.pid > 0
        assert zygote.level in (*LEVELS, "none")
        assert set(zygote.probe) <= set(LEVELS) and zygote.probe  # the levels tried, strongest first
        assert zygote.boot["probe_s"] > 0
        assert any("CUDA probe" in r.getMessage() for r in caplog.records)
        if zygote.level != "pidns+ro":
            assert any("candidate isolation on this GPU machine" in r.getMessage() for r in caplog.records)
        child.kill()  # without a GPU it ends by itself (setup failure); with one it would wait for its draws
        second = ChildProcess(zygote, spec)  # answered at once: the level is known now
        assert second.pid > 0 and second.pid != child.pid
        second.kill()
    finally:
        zygote.close()


def test_a_cpu_zygote_names_its_level_when_ready() -> None:
    zygote = Zygote(cuda=False)
    try:
        zygote.start()
        assert zygote.level == LEVELS[0] and zygote.probe == {}
    finally:
        zygote.close()


def test_the_cuda_primer_imports_no_torch_and_never_raises() -> None:
    probe = ("import sys\nfrom cuda_agent.sandbox_pool.harness.cuda_primer import prime_cuda_context\n"
             "p = prime_cuda_context(0)\np.join(30)\n"
             "print('TORCH', 'torch' in sys.modules, 'DONE', (p.took_s is None) != (p.error is None))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert "TORCH False DONE True" in out.stdout  # exactly one of: primed (took_s) or why not (error)


def test_the_cuda_primer_reports_a_device_that_is_not_there() -> None:
    primer = prime_cuda_context(10_000)
    primer.join(30)
    assert primer.took_s is None and primer.error  # no driver here, or no such device
