"""The terminal-sandbox contract, run against every backend (conftest.BACKENDS).

Each test states one promise of `TerminalSandbox` (base.py) or one fault that must stay
contained (issue 3: fork bomb, memory hog, disk filler, protected-file write, network).
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import uuid

import pytest

from cuda_agent.errors import SandboxError, ToolCallError

pytestmark = pytest.mark.timeout(180)


def marker() -> str:
    return f"mark{uuid.uuid4().hex[:12]}"


# ---------------------------------------------------------------------- commands
async def test_run_exit_code_stdout_stderr(make_sandbox):
    sb = await make_sandbox()
    result = await sb.run("echo out; echo err >&2; exit 3")
    assert (result.exit_code, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert not result.truncated and not result.timed_out
    assert (await sb.run("true")).exit_code == 0


async def test_runs_in_workspace_mount_with_env(make_sandbox):
    sb = await make_sandbox(env={"CUDA_AGENT_TEST": "42"})
    result = await sb.run('pwd; echo "$CUDA_AGENT_TEST"; cat model.py')
    assert result.stdout.splitlines() == ["/workspace", "42", "class Model: pass"]


async def test_timeout_kills_every_process(make_sandbox, leftover):
    sb = await make_sandbox()
    tag = marker()
    result = await sb.run(f"trap '' TERM; (sleep 300; : {tag}) & sleep 300 # {tag}", timeout_s=1.0)
    assert result.timed_out and result.exit_code == 124
    assert result.duration_s < 15
    assert await leftover(tag) == []
    assert (await sb.run("echo alive")).stdout == "alive\n"


async def test_cancelled_run_kills_its_command(make_sandbox, leftover):
    sb = await make_sandbox()
    tag = marker()
    task = asyncio.create_task(sb.run(f"sleep 300 # {tag}"))
    await asyncio.sleep(1.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await leftover(tag) == []
    assert (await sb.run("echo alive")).stdout == "alive\n"


async def test_background_leftovers_end_with_their_command(make_sandbox, leftover):
    sb = await make_sandbox()
    tag = marker()
    result = await sb.run(f"(sleep 300; : {tag}) & echo started")
    assert result.stdout == "started\n" and result.duration_s < 15
    assert await leftover(tag) == []


async def test_output_truncated_with_flag(make_sandbox):
    sb = await make_sandbox(max_output_bytes=1000)
    result = await sb.run("head -c 100000 /dev/zero | tr '\\0' a; head -c 50 /dev/zero | tr '\\0' b >&2")
    assert result.truncated
    assert result.stdout.startswith("a" * 400) and result.stdout.endswith("a" * 400)
    assert "truncated" in result.stdout and len(result.stdout) < 1200
    assert result.stderr == "b" * 50


async def test_toolchain_and_venv_python_work(make_sandbox):
    sb = await make_sandbox()
    await sb.write_file("kernels/hello.cpp", b'#include <cstdio>\nint main(){std::puts("hello");}\n')
    result = await sb.run("g++ -O0 kernels/hello.cpp -o kernels/hello && ./kernels/hello")
    assert (result.exit_code, result.stdout) == (0, "hello\n"), result.stderr
    result = await sb.run("python -c 'import sys, pydantic; print(sys.prefix)'")
    assert result.stdout.strip() == sys.prefix, result.stderr


# ---------------------------------------------------------------------- files
async def test_read_write_list(make_sandbox, workspace):
    sb = await make_sandbox()
    await sb.write_file("kernels/a.cu", b"__global__ void k() {}\n")
    await sb.write_file("model_new.py", b"# new\n")
    assert await sb.read_file("kernels/a.cu") == b"__global__ void k() {}\n"
    assert (workspace / "model_new.py").read_bytes() == b"# new\n"
    assert (await sb.run("cat kernels/a.cu; echo x >> kernels/a.cu")).stdout.startswith("__global__")
    assert (await sb.read_file("kernels/a.cu")).endswith(b"x\n")
    assert await sb.list_files("**/*.cu") == ["kernels/a.cu"]
    assert await sb.list_files("*.py") == ["model.py", "model_new.py"]
    everything = await sb.list_files()
    assert {"SKILL.md", "utils/compile.sh", "kernels/a.cu"} <= set(everything)
    assert "kernels" not in everything


async def test_files_written_by_api_are_editable_in_shell(make_sandbox):
    sb = await make_sandbox()
    await sb.write_file("kernels/deep/new.cu", b"one\n")
    result = await sb.run("echo two >> kernels/deep/new.cu && touch kernels/deep/other.cu && cat kernels/deep/new.cu")
    assert (result.exit_code, result.stdout) == (0, "one\ntwo\n"), result.stderr


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "kernels/../../outside.txt", ""])
async def test_paths_outside_the_workspace_are_refused(make_sandbox, path):
    sb = await make_sandbox()
    with pytest.raises(ToolCallError):
        await sb.read_file(path)
    with pytest.raises(ToolCallError):
        await sb.write_file(path, b"x")


async def test_symlink_escapes_are_refused(make_sandbox, workspace, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    (workspace / "link_file").symlink_to(outside / "secret.txt")
    (workspace / "link_dir").symlink_to(outside)
    sb = await make_sandbox()
    assert (await sb.run("ln -s /etc/hostname kernels/host && ln -s /etc kernels/etc")).exit_code == 0
    for path in ("link_file", "link_dir/secret.txt", "kernels/host", "kernels/etc/hostname"):
        with pytest.raises(ToolCallError):
            await sb.read_file(path)
    for path in ("link_file", "link_dir/secret.txt", "link_dir/new.txt"):
        with pytest.raises(ToolCallError):
            await sb.write_file(path, b"overwritten")
    assert (outside / "secret.txt").read_text() == "secret"
    assert not (outside / "new.txt").exists()
    assert not any(p.startswith("link_dir/") for p in await sb.list_files("**/*"))


@pytest.mark.parametrize(
    "path", ["model.py", "./model.py", "kernels/../model.py", "utils/compile.sh", "utils/new.py", "binding.cpp",
             "binding_registry.h", "SKILL.md"]
)
async def test_protected_files_refused_by_api(make_sandbox, workspace, path):
    sb = await make_sandbox()
    with pytest.raises(ToolCallError, match="protected"):
        await sb.write_file(path, b"hacked")
    assert (workspace / "model.py").read_text() == "class Model: pass\n"
    assert not (workspace / "utils" / "new.py").exists()
    assert (await sb.read_file("model.py")) == b"class Model: pass\n"


@pytest.mark.parametrize(
    "command",
    ["echo hacked > model.py", "echo hacked >> utils/compile.sh", "rm -f model.py", "mv model.py gone.py",
     "chmod 777 model.py", "touch utils/new.py", "rm -rf utils", "echo x > binding.cpp", "echo x > SKILL.md",
     "truncate -s 0 binding_registry.h", "ln model.py kernels/hard && echo hacked > kernels/hard",
     "unshare -Urm sh -c 'umount -l /workspace/model.py; echo hacked > /workspace/model.py'"],
)
async def test_protected_files_read_only_in_shell(make_sandbox, workspace, command):
    sb = await make_sandbox()
    result = await sb.run(command)
    assert result.exit_code != 0
    assert (workspace / "model.py").read_text() == "class Model: pass\n"
    assert (workspace / "utils" / "compile.sh").read_text() == "echo compile\n"
    assert (workspace / "binding.cpp").read_text() == "// binding\n"
    assert (workspace / "binding_registry.h").read_text() == "// registry\n"
    assert (workspace / "SKILL.md").read_text() == "# skill\n"
    assert not (workspace / "utils" / "new.py").exists()
    assert (await sb.run("cp model.py kernels/ref.py && cat kernels/ref.py")).exit_code == 0


async def test_no_nested_user_namespaces(make_sandbox, backend):
    if backend.startswith("local") and os.geteuid() == 0:
        pytest.skip("root callers' local sandboxes cannot forbid user namespaces (docs/sandbox.md)")
    sb = await make_sandbox()
    assert (await sb.run("unshare -U true")).exit_code != 0


async def test_extra_read_only_mounts(make_sandbox, tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "info.txt").write_text("shared")
    sb = await make_sandbox(extra_ro_mounts={str(extra): "/opt/cuda-agent-extra"})
    result = await sb.run("cat /opt/cuda-agent-extra/info.txt; echo x > /opt/cuda-agent-extra/info.txt")
    assert result.stdout == "shared" and result.exit_code != 0
    assert (extra / "info.txt").read_text() == "shared"


async def test_host_unix_socket_reachable_through_read_only_mount(make_sandbox, tmp_path):
    """How the skill scripts reach the evaluation pool: a unix socket, no network."""

    async def echo(reader, writer):
        writer.write(b"pong:" + await reader.read(4))
        await writer.drain()
        writer.close()

    path = tmp_path / "pool.sock"
    server = await asyncio.start_unix_server(echo, path=str(path))
    path.chmod(0o666)  # connect() needs write permission on the socket for the sandbox's uid
    try:
        sb = await make_sandbox(extra_ro_mounts={str(path): "/run/cuda-agent/pool.sock"})
        code = ("import socket; s = socket.socket(socket.AF_UNIX); s.connect('/run/cuda-agent/pool.sock'); "
                "s.sendall(b'ping'); print(s.recv(16).decode())")
        result = await sb.run(f'python -c "{code}"', timeout_s=30)
        assert result.stdout == "pong:ping\n", result.stderr
    finally:
        server.close()


# ---------------------------------------------------------------------- isolation and limits
async def test_no_network_to_host_loopback(make_sandbox):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        sb = await make_sandbox()
        result = await sb.run(f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected", timeout_s=20)
        assert result.exit_code != 0 and "connected" not in result.stdout
        with pytest.raises(BlockingIOError):
            listener.accept()
        result = await sb.run("cat /proc/net/dev | tail -n +3 | cut -d: -f1")
        assert set(result.stdout.split()) <= {"lo"}  # no interface but (a down) loopback
    finally:
        listener.close()


async def test_fork_bomb_contained(make_sandbox, leftover):
    sb = await make_sandbox(max_processes=64)
    tag = marker()
    result = await sb.run(f"bomb() {{ bomb | bomb & }}; bomb; sleep 3 # {tag}", timeout_s=30)
    assert result.duration_s < 25
    assert await leftover(tag) == []
    assert (await sb.run("echo alive")).stdout == "alive\n"


async def test_memory_hog_contained(make_sandbox):
    sb = await make_sandbox(memory_mb=256)
    result = await sb.run("python -c 'x = bytearray(1 << 30); print(len(x))'", timeout_s=60)
    assert result.exit_code != 0 and "1073741824" not in result.stdout
    assert (await sb.run("echo alive")).stdout == "alive\n"


async def test_disk_filler_contained(make_sandbox, workspace):
    sb = await make_sandbox(file_size_mb=8)
    result = await sb.run("head -c 50000000 /dev/zero > kernels/big.bin", timeout_s=60)
    assert result.exit_code != 0
    assert (workspace / "kernels" / "big.bin").stat().st_size <= 8 * 1024 * 1024
    result = await sb.run("head -c 50000000 /dev/zero > /tmp/big.bin; stat -c %s /tmp/big.bin", timeout_s=60)
    assert int(result.stdout.strip()) <= 8 * 1024 * 1024


async def test_cpu_time_limit(make_sandbox):
    sb = await make_sandbox(cpu_time_s=1)
    result = await sb.run("while :; do :; done", timeout_s=30)
    assert not result.timed_out and result.exit_code != 0 and result.duration_s < 20


async def test_tmp_is_private_and_kept_between_commands(make_sandbox):
    sb = await make_sandbox()
    tag = marker()
    assert (await sb.run(f"echo {tag} > /tmp/{tag}")).exit_code == 0
    assert (await sb.run(f"cat /tmp/{tag}")).stdout == f"{tag}\n"
    assert not os.path.exists(f"/tmp/{tag}")


# ---------------------------------------------------------------------- background jobs
async def _poll_until_done(sb, job_id, timeout_s=30.0):
    out, err = "", ""
    for _ in range(int(timeout_s / 0.1)):
        status = await sb.poll_background(job_id)
        out, err = out + status.new_stdout, err + status.new_stderr
        if status.state != "running":
            return status, out, err
        await asyncio.sleep(0.1)
    raise AssertionError(f"job {job_id} still running")


async def test_background_start_poll_exit(make_sandbox):
    sb = await make_sandbox()
    job = await sb.start_background("for i in 1 2 3; do echo $i; sleep 0.2; done; echo oops >&2; exit 3")
    first = await sb.poll_background(job)
    assert first.job_id == job and first.state == "running"
    status, out, err = await _poll_until_done(sb, job)
    assert (status.state, status.exit_code) == ("exited", 3)
    assert first.new_stdout + out == "1\n2\n3\n" and err == "oops\n"
    again = await sb.poll_background(job)
    assert (again.state, again.new_stdout, again.new_stderr) == ("exited", "", "")


async def test_background_kill(make_sandbox, leftover):
    sb = await make_sandbox()
    tag = marker()
    job = await sb.start_background(f"echo started; sleep 300 # {tag}")
    await asyncio.sleep(0.5)
    status = await sb.kill_background(job)
    assert status.state == "killed" and status.exit_code is not None
    assert await leftover(tag) == []
    assert (await sb.poll_background(job)).state == "killed"


async def test_background_unknown_job_and_limit(make_sandbox):
    sb = await make_sandbox(max_background_jobs=2)
    with pytest.raises(ToolCallError):
        await sb.poll_background("bash_999")
    await sb.start_background("sleep 60")
    await sb.start_background("sleep 60")
    with pytest.raises(ToolCallError, match="background jobs"):
        await sb.start_background("sleep 60")


async def test_close_kills_everything(make_sandbox, leftover):
    sb = await make_sandbox()
    tag = marker()
    await sb.start_background(f"sleep 300 # {tag}")
    running = asyncio.create_task(sb.run(f"sleep 300 # {tag}"))
    await asyncio.sleep(1.0)
    await sb.close()
    await asyncio.wait_for(asyncio.gather(running, return_exceptions=True), 30)
    assert await leftover(tag) == []
    await sb.close()  # idempotent
    with pytest.raises(SandboxError):
        await sb.run("true")


async def test_parallel_commands(make_sandbox):
    sb = await make_sandbox()
    results = await asyncio.gather(*(sb.run(f"sleep 0.3; echo {i}") for i in range(4)))
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(4)]


async def test_missing_paths_and_folders_raise_both_error_kinds(make_sandbox):
    sb = await make_sandbox()
    for path in ("nope.py", "kernels/nope.cu", "nodir/x.cu"):
        with pytest.raises(FileNotFoundError):
            await sb.read_file(path)
        with pytest.raises(ToolCallError):
            await sb.read_file(path)
    with pytest.raises(IsADirectoryError):
        await sb.read_file("kernels")
    with pytest.raises(IsADirectoryError):
        await sb.write_file("kernels", b"x")
