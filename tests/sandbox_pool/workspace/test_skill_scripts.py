"""The workspace's utils/ scripts as a model runs them, against a pool found by $CUDA_AGENT_POOL."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from cuda_agent.sandbox_pool.workspace import create_workspace

ROOT = Path(__file__).resolve().parents[3]
SOLUTION = ROOT / "examples/solutions/diag_matmul/cpu_fast"


def test_verification_reaches_the_pool_named_by_the_environment(tmp_path: Path) -> None:
    ws = create_workspace((ROOT / "examples/problems/diag_matmul.py").read_text(), tmp_path / "ws", "cpu")
    (ws / "model_new.py").write_text((SOLUTION / "model_new.py").read_text())
    for kernel in (SOLUTION / "kernels").iterdir():
        shutil.copy(kernel, ws / "kernels" / kernel.name)
    socket_path = tmp_path / "pool.sock"
    bin_dir = str(Path(sys.executable).parent)
    server = subprocess.Popen([str(Path(bin_dir) / "cuda-agent"), "pool", "serve", "--device", "cpu", "--socket",
                               str(socket_path)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not socket_path.exists() and time.time() < deadline:
            time.sleep(0.2)
        assert socket_path.exists(), "pool did not start"
        env = {**os.environ, "CUDA_AGENT_POOL": str(socket_path), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
        out = subprocess.run([sys.executable, "-m", "utils.verification"], cwd=ws, env=env, capture_output=True,
                             text=True, timeout=600)
        assert out.returncode == 0, out.stdout + out.stderr
        assert "[status] ok" in out.stdout
        status = subprocess.run([str(Path(bin_dir) / "cuda-agent"), "pool", "status", "--address", str(socket_path),
                                 "--json"], capture_output=True, text=True, timeout=60)
        assert json.loads(status.stdout)["completed"] == 1, status.stdout  # the job went to that pool
    finally:
        server.terminate()
        server.wait(timeout=30)
