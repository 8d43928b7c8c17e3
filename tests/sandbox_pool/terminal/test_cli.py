"""``cuda-agent sandbox exec``: the command's output and exit code, through the real CLI."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)


def cli(*args: str, through_main: bool = False) -> subprocess.CompletedProcess:
    """Run ``cuda-agent sandbox ARGS`` (the group alone unless `through_main`)."""
    if through_main:
        argv = [sys.executable, "-m", "cuda_agent.cli.main", "sandbox", *args]
    else:
        argv = [sys.executable, "-c", "from cuda_agent.sandbox_pool.terminal.cli import app; app()", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=100)


def test_exec_prints_output_and_exits_with_code(workspace):
    done = cli("exec", str(workspace), "--", "cat model.py; echo oops >&2; echo x > model.py; exit 5")
    assert done.returncode == 5
    assert done.stdout == "class Model: pass\n"
    assert "oops" in done.stderr and "Read-only file system" in done.stderr


def test_exec_joins_words_and_times_out(workspace):
    assert cli("exec", str(workspace), "--", "echo", "a b", "c").stdout == "a b c\n"
    done = cli("exec", "--timeout", "1", str(workspace), "--", "sleep 30")
    assert done.returncode == 124 and "timed out" in done.stderr


@pytest.mark.docker
def test_exec_docker_backend(workspace, docker_image):
    done = cli("exec", "--backend", "docker", "--image", docker_image, "--host-toolchain", str(workspace), "--",
               "pwd; ls model.py")
    assert (done.returncode, done.stdout) == (0, "/workspace\nmodel.py\n"), done.stderr


def test_help_has_an_example():
    done = cli("exec", "--help", through_main=True)
    assert done.returncode == 0 and "cuda-agent sandbox exec" in done.stdout


def test_exec_passes_the_pool_into_the_sandbox(workspace, tmp_path):
    """$CUDA_AGENT_POOL (the pool's socket) reaches commands inside as the pool's sandbox socket, mounted and
    named by the variable, after the workspace's model.py was registered on the pool's own socket."""
    import json
    import os
    import socket
    import threading

    path, sandbox_path = tmp_path / "pool.sock", tmp_path / "pool.sandbox.sock"
    own, sandbox = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM), socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    own.bind(str(path))
    sandbox.bind(str(sandbox_path))
    for listener in (own, sandbox):
        listener.listen(1)
    requests: list[dict] = []

    def answer_one() -> None:  # the pool's own socket: one register request
        conn, _ = own.accept()
        with conn, conn.makefile("rb") as lines:
            requests.append(json.loads(lines.readline()))
            conn.sendall(b'{"ok": true}\n')

    thread = threading.Thread(target=answer_one, daemon=True)
    thread.start()
    try:
        argv = [sys.executable, "-m", "cuda_agent.cli.main", "sandbox", "exec", str(workspace), "--",
                'echo "$CUDA_AGENT_POOL"; test -S "$CUDA_AGENT_POOL" && echo socket']
        done = subprocess.run(argv, capture_output=True, text=True, timeout=100,
                              env={**os.environ, "CUDA_AGENT_POOL": str(path)})
        thread.join(timeout=10)
    finally:
        own.close()
        sandbox.close()
    assert (done.returncode, done.stdout) == (0, f"{sandbox_path.resolve()}\nsocket\n"), done.stderr
    assert [(r.get("op"), r.get("problem_src")) for r in requests] == [("register", (workspace / "model.py").read_text())]
    missing = cli("exec", "--pool", str(tmp_path / "none.sock"), str(workspace), "--", "true", through_main=True)
    assert missing.returncode == 2 and "none.sock" in missing.stderr and "Traceback" not in missing.stderr
