"""The skill scripts as thin clients: with a served pool they never import torch, the pool
builds into its cache (the script copies the module from it) and serves the reference's
profile once per task."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.workspace import create_workspace

ROOT = Path(__file__).resolve().parents[3]
SOLUTION = ROOT / "examples/solutions/diag_matmul/cpu_fast"
BIN = Path(sys.executable).parent

# Runs one utils module as `python3 -m utils.X` would, then reports what it imported.
PROBE = """
import runpy, sys
sys.argv = ["{module}"]
try:
    runpy.run_module("{module}", run_name="__main__", alter_sys=True)
    code = 0
except SystemExit as exc:
    code = exc.code
print("PROBE torch=%s exit=%s" % ("torch" in sys.modules, code))
"""


def run_script(module: str, ws: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE.format(module=module)], cwd=ws, env=env,
                          capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_skill_scripts_stay_light_and_use_the_pools_cache(tmp_path: Path) -> None:
    ws = create_workspace((ROOT / "examples/problems/diag_matmul.py").read_text(), tmp_path / "ws", "cpu")
    (ws / "model_new.py").write_text((SOLUTION / "model_new.py").read_text())
    for kernel in (SOLUTION / "kernels").iterdir():
        shutil.copy(kernel, ws / "kernels" / kernel.name)
    cache, sock = tmp_path / "cache", tmp_path / "pool.sock"
    env = {**os.environ, "CUDA_AGENT_CACHE": str(cache), "PATH": f"{BIN}:{os.environ['PATH']}"}
    server = subprocess.Popen([str(BIN / "cuda-agent"), "pool", "serve", "--device", "cpu", "--socket", str(sock)],
                              env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 180
        while not sock.exists() and time.time() < deadline:
            time.sleep(0.2)
        assert sock.exists(), "pool did not start"
        env["CUDA_AGENT_POOL"] = str(sock)

        out = run_script("utils.compile", ws, env)
        assert "PROBE torch=False exit=0" in out.stdout, out.stdout + out.stderr
        built = list((cache / "build").rglob("cuda_extension.so"))
        assert len(built) == 1  # built by the pool, in the pool's cache
        assert (ws / "cuda_extension.so").read_bytes() == built[0].read_bytes()

        (ws / "kernels" / "broken.cpp").write_text("int broken( {\n")
        out = run_script("utils.compile", ws, env)
        assert "PROBE torch=False exit=1" in out.stdout and "[compile] FAILED" in out.stdout, out.stdout
        (ws / "kernels" / "broken.cpp").unlink()

        out = run_script("utils.verification", ws, env)
        assert "PROBE torch=False exit=0" in out.stdout and "[status] ok" in out.stdout, out.stdout + out.stderr

        out = run_script("utils.profiling", ws, env)
        assert "PROBE torch=False exit=0" in out.stdout, out.stdout + out.stderr
        assert "[reference profile] top operators" in out.stdout and "[reward]" in out.stdout
        profiles = list((cache / "reference_profiles").glob("*.txt"))
        assert len(profiles) == 1
        stamp = profiles[0].stat().st_mtime_ns
        out = run_script("utils.profiling", ws, env)
        assert "PROBE torch=False" in out.stdout and "[reference profile] top operators" in out.stdout, out.stdout
        assert profiles[0].stat().st_mtime_ns == stamp  # served from the pool's cache, not measured again

        os.chmod(ws / "model_new.py", 0o644)
        (ws / "model_new.py").write_text("import os\n" + (SOLUTION / "model_new.py").read_text())
        out = run_script("utils.verification", ws, env)
        assert "PROBE torch=False exit=1" in out.stdout and "[status] violation" in out.stdout, out.stdout
    finally:
        server.terminate()
        server.wait(timeout=60)
