"""A scripted agent session on a CPU problem, driven only through the tools.

write kernel -> compile -> verify -> profile -> final evaluation with reward >= 1. Needs
the lead's workspace scripts (utils/ -> cuda_agent.sandbox_pool.workspace.skill_scripts)
and the evaluator; skipped until they exist. Runs on every sandbox backend available.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.terminal.base import TerminalSandbox
from cuda_agent.tools import ToolSession, call_tool

pytestmark = pytest.mark.slow

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return torch.relu(x) * self.scale


def get_inputs():
    return [torch.randn(256, 1024)]


def get_init_inputs():
    return [2.0]
'''

KERNEL = r'''#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>
#include "../binding_registry.h"

static void scale_relu_cpu(const float* x, float* y, float s, int64_t n) {
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] > 0.f ? x[i] * s : 0.f;
}

torch::Tensor scale_relu(torch::Tensor x, double s) {
  TORCH_CHECK(x.device().is_cpu() && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
              "x: contiguous float32 CPU tensor");
  auto y = torch::empty_like(x);
  scale_relu_cpu(x.data_ptr<float>(), y.data_ptr<float>(), (float)s, x.numel());
  return y;
}

static void register_scale_relu(pybind11::module& m) { m.def("scale_relu", &scale_relu); }
REGISTER_BINDING(scale_relu, register_scale_relu);
'''

MODEL_NEW = '''import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return cuda_extension.scale_relu(x.contiguous(), self.scale)
'''


@pytest.fixture
def workspace(tmp_path: Path) -> Path:  # overrides conftest's: a real CPU workspace
    pytest.importorskip("cuda_agent.sandbox_pool.workspace.skill_scripts", reason="utils/ scripts not written yet")
    from cuda_agent.sandbox_pool.workspace import create_workspace

    return create_workspace(PROBLEM, tmp_path / "ws", device="cpu")


async def _bash(session: ToolSession, command: str) -> str:
    obs = await call_tool(session, "Bash", {"command": command, "timeout": 600_000})
    assert not obs.is_error and obs.metrics["exit_code"] == 0, obs.text
    return obs.text


async def test_scripted_session_reaches_a_positive_reward(
    sandbox: TerminalSandbox, workspace: Path, request: pytest.FixtureRequest
) -> None:
    from cuda_agent.sandbox_pool.harness.evaluator import evaluate_job
    from cuda_agent.sandbox_pool.harness.models import EvalJob
    from cuda_agent.sandbox_pool.workspace import read_candidate_files

    session = ToolSession(sandbox)
    assert "Model" in (await call_tool(session, "Read", {"file_path": "model.py"})).text
    first = await call_tool(session, "Bash", {"command": "python3 -m utils.profiling", "timeout": 600_000})
    assert "reference profile" in first.text  # no candidate yet: the reference's profile only
    for path, content in {"kernels/scale_relu.cpp": KERNEL, "model_new.py": MODEL_NEW}.items():
        assert not (await call_tool(session, "Write", {"file_path": path, "content": content})).is_error
    await _bash(session, "bash utils/compile.sh")
    await _bash(session, "python3 -m utils.verification")
    profile = await _bash(session, "python3 -m utils.profiling")
    await session.close()
    print(profile)

    job = EvalJob(problem_src=PROBLEM, files=read_candidate_files(workspace), device="cpu")
    result = await evaluate_job(job)
    assert result.reward is not None and result.reward >= 1, result
