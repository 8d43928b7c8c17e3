"""The hardening of evaluation children, exercised directly (candidates can no longer reach
fork, files or the network through the static policies, so the runtime walls are tested on
their own)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux namespaces")

SCRIPT = textwrap.dedent(
    """
    import os, socket, sys, time
    from cuda_agent.sandbox_pool.harness.child.hardening import harden_child
    work, outside, pidfile = sys.argv[1], sys.argv[2], sys.argv[3]
    print(harden_child(isolate=True, memory_limit_mb=None, file_size_mb=16, work_dir=work), flush=True)
    open(os.path.join(work, "ok.txt"), "w").write("inside")
    try:
        open(outside, "w").write("escaped")
        print("WROTE_OUTSIDE", flush=True)
    except OSError as exc:
        print("write outside refused:", exc.errno, flush=True)
    try:
        socket.create_connection(("127.0.0.1", int(sys.argv[4])), timeout=2)
        print("CONNECTED", flush=True)
    except OSError as exc:
        print("connect refused:", exc.errno, flush=True)
    pid = os.fork()
    if pid == 0:
        os.setsid()
        open(pidfile, "w").write(str(os.getpid()))
        time.sleep(120)
        os._exit(0)
    time.sleep(120)
    """
)


def _host_pid_of(tag: str) -> list[int]:
    out = subprocess.run(["pgrep", "-f", tag], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_child_has_read_only_fs_no_network_and_takes_its_descendants_along(tmp_path: Path) -> None:
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    work = tmp_path / "work"
    work.mkdir()
    outside = tmp_path / "outside.txt"
    tag = f"cuda_agent_isolation_test_{os.getpid()}_{time.time_ns()}"
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(work), str(outside), str(work / "pid"), str(listener.getsockname()[1]), tag],
        stdout=subprocess.PIPE, text=True, cwd="/",
    )
    lines = []
    assert proc.stdout is not None
    for _ in range(3):
        lines.append(proc.stdout.readline().strip())
    listener.close()
    assert "userns+netns" in lines[0] and "pidns" in lines[0] and "ro-fs" in lines[0], lines
    assert (work / "ok.txt").read_text() == "inside"
    assert not outside.exists() and "write outside refused" in lines[1], lines
    assert "connect refused" in lines[2], lines
    assert _host_pid_of(tag), "the test's processes should be running"
    os.killpg(proc.pid, 9)  # what the worker does: kill the child's session
    proc.wait(timeout=10)
    deadline = time.time() + 10
    while _host_pid_of(tag) and time.time() < deadline:
        time.sleep(0.2)
    assert not _host_pid_of(tag), "a setsid() grandchild outlived the evaluation child"
