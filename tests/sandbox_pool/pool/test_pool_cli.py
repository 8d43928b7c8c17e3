"""`cuda-agent pool serve` / `pool status` end to end, and a skill-script-style client."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuda_agent.sandbox_pool.harness import EvalStatus
from cuda_agent.sandbox_pool.pool.cli import app

CLIENT_SCRIPT = """
import asyncio, sys
sys.path.insert(0, {tests!r})
from conftest import make_job
from cuda_agent.sandbox_pool.pool import connect_pool

async def main():
    async with connect_pool() as pool:  # $CUDA_AGENT_POOL: the served socket
        result = await pool.evaluate(make_job("cpu_cheat"))
    print(result.status.value)

asyncio.run(main())
"""


@pytest.fixture
def served_pool(pool_cache: Path):
    """`cuda-agent pool serve` in a subprocess; yields the address it printed."""
    folder = tempfile.mkdtemp(prefix="pool", dir="/tmp")
    socket = os.path.join(folder, "pool.sock")
    proc = subprocess.Popen([sys.executable, "-m", "cuda_agent.cli.main", "pool", "serve", "--socket", socket],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "CUDA_AGENT_CACHE": str(pool_cache)})
    try:
        address = proc.stdout.readline().strip()  # type: ignore[union-attr]
        assert address == socket, f"serve printed {address!r}"
        yield address
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert not os.path.exists(socket), "the socket is removed on exit"
        os.rmdir(folder)


def test_serve_then_status_and_a_client_through_the_environment(served_pool: str) -> None:
    tests = str(Path(__file__).parent)
    env = {**os.environ, "CUDA_AGENT_POOL": served_pool}
    out = subprocess.run([sys.executable, "-c", CLIENT_SCRIPT.format(tests=tests)], env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.stdout.strip() == EvalStatus.VIOLATION.value, out.stderr[-2000:]

    runner = CliRunner()
    as_json = runner.invoke(app, ["status", "--address", served_pool, "--json"])
    assert as_json.exit_code == 0, as_json.output
    status = json.loads(as_json.output)
    assert status["backend"] == "local" and status["address"] == served_pool
    assert status["completed"] == 1 and status["latency"]["count"] == 1
    assert status["workers"][0]["jobs_done"] == 1

    table = runner.invoke(app, ["status"], env={"CUDA_AGENT_POOL": served_pool})
    assert table.exit_code == 0, table.output
    assert "cpu:0" in table.output and "p50" in table.output and "queue depth 0" in table.output


def test_status_without_a_pool_exits_nonzero(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["status", "--address", str(tmp_path / "none.sock")])
    assert result.exit_code == 3 and "no pool answers" in result.output  # an infrastructure failure

