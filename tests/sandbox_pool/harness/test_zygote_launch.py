"""The forkserver started before the CLI's imports (`zygote_launch`, `cli/entry.py`): a local `eval`
adopts it, and one nobody adopts never outlives the process that started it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from cuda_agent.cli.entry import runs_local_eval
from cuda_agent.sandbox_pool.harness import zygote_launch
from cuda_agent.sandbox_pool.harness.child.hardening import LEVELS
from cuda_agent.sandbox_pool.harness.runner import Zygote


@pytest.mark.parametrize(("args", "env", "expected"), [
    (["eval", "/ws"], {}, True),
    (["--debug", "eval", "/ws", "--json"], {}, True),
    (["eval", "/ws", "--pool", "/tmp/pool.sock"], {}, False),
    (["eval", "/ws", "--pool=/tmp/pool.sock"], {}, False),
    (["eval", "/ws"], {"CUDA_AGENT_POOL": "/tmp/pool.sock"}, False),
    (["eval", "--help"], {}, False),
    (["init", "problem.py", "/ws"], {}, False),
    ([], {}, False),
])
def test_only_a_local_eval_starts_the_forkserver_early(args: list[str], env: dict[str, str], expected: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_AGENT_POOL", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert runs_local_eval(args) is expected


def test_the_evaluator_adopts_the_early_forkserver_and_tells_it_its_mode() -> None:
    zygote_launch.launch_early()
    early = zygote_launch._early
    assert early is not None
    zygote = Zygote(cuda=False)
    try:
        zygote.start()
        assert zygote._proc is early.proc  # adopted, not a second process
        assert zygote.level == LEVELS[0]  # a cpu zygote names its level in its ready message
        assert zygote.ready_at is not None and zygote.ready_at <= time.monotonic()
        assert zygote_launch.take_early() is None  # taken once
    finally:
        zygote.close()


def test_a_zygote_that_wants_its_own_environment_starts_its_own() -> None:
    zygote_launch.launch_early()
    early = zygote_launch._early
    zygote = Zygote(cuda=False, env={"CUDA_AGENT_TEST_MARK": "1"})
    try:
        zygote.launch()
        assert early is not None and zygote._proc is not early.proc
    finally:
        zygote.close()
        leftover = zygote_launch.take_early()
        if leftover is not None:
            leftover.kill()


def _gone(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as stat:
                if stat.read().split()[2] == "Z":  # a zombie: dead, waiting for its reaper
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("how", ["exits", "is killed"])
def test_an_unadopted_forkserver_dies_with_its_starter(how: str) -> None:
    # The starter prints the zygote's pid and then exits normally (atexit) or is SIGKILLed (the zygote's
    # parent-death signal, or its check of its parent right after setting it).
    script = ("import os, sys, time\nfrom cuda_agent.sandbox_pool.harness import zygote_launch\n"
              "zygote_launch.launch_early()\nprint(zygote_launch._early.proc.pid, flush=True)\n"
              + ("time.sleep(60)\n" if how == "is killed" else "time.sleep(0.5)\n"))
    starter = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert starter.stdout is not None
        pid = int(starter.stdout.readline())
        if how == "is killed":
            time.sleep(0.5)  # its torch import is under way
            starter.kill()
        starter.wait(timeout=30)
        assert _gone(pid, within_s=30), f"zygote {pid} outlived its starter"
    finally:
        if starter.poll() is None:
            starter.kill()
            starter.wait()
        try:
            os.kill(pid, 9)
        except (ProcessLookupError, UnboundLocalError):
            pass


def _zygotes_of(starter_pid: int) -> list[int]:
    """Live zygote processes started by `starter_pid` (their last argument names it)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")[:-1]
            with open(f"/proc/{entry}/stat") as f:
                zombie = f.read().split()[2] == "Z"
        except OSError:
            continue
        if not zombie and zygote_launch.MODULE.encode() in argv and argv[-1] == str(starter_pid).encode():
            found.append(int(entry))
    return found


def test_a_rejected_candidate_through_the_command_answers_whole_and_leaves_no_forkserver(tmp_path) -> None:  # noqa: ANN001
    # The command exits without the interpreter's teardown (entry.run): its answer must still be flushed
    # whole and the exit handlers must still kill the forkserver it started before its imports.
    from cuda_agent.sandbox_pool.workspace import create_workspace

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    ws = create_workspace(open(os.path.join(root, "examples/problems/diag_matmul.py")).read(), tmp_path / "ws", "cpu")
    (ws / "model_new.py").write_text((ws / "model_new.py").read_text() + "\nimport subprocess\n")
    cli = subprocess.Popen([sys.executable, "-m", "cuda_agent.cli.main", "eval", str(ws), "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = cli.communicate(timeout=120)
    assert cli.returncode == 0, err
    import json

    answer = json.loads(out)
    assert answer["status"] in ("violation", "static_check_failed") and answer["reward"] == -1.0
    assert _zygotes_of(cli.pid) == []
