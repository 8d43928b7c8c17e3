"""The `cuda-agent` console command's first and last lines around the CLI, for a local `eval`.

A one-shot `cuda-agent eval DIR` (no pool) ends with the evaluator's forkserver: a Python that
imports torch (3-4.5 s on an H200 host). It is started here, before the CLI's own modules load
(~0.5 s), and adopted by the evaluator (`harness/zygote_launch.py`); a static reject or a cached
result never uses it and it is killed at exit. After its answer the command exits without the
interpreter's teardown of torch (`run`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Sequence

POOL_ENV = "CUDA_AGENT_POOL"  # pool/config.ENV_ADDRESS, not imported: this module stays standard-library only
ROOT_FLAGS = ("--debug",)


def runs_local_eval(args: Sequence[str]) -> bool:
    """`cuda-agent [--debug] eval ...` evaluated here: no --pool, no $CUDA_AGENT_POOL, no --help."""
    words = [a for a in args if a not in ROOT_FLAGS]
    if not words or words[0] != "eval" or os.environ.get(POOL_ENV):
        return False
    return not any(a in ("--help", "--pool") or a.startswith("--pool=") for a in words[1:])


def start_early_work(args: Sequence[str]) -> None:
    """What a command about to run can start before the CLI imports its modules."""
    if runs_local_eval(args):
        from cuda_agent.sandbox_pool.harness.zygote_launch import launch_early

        launch_early()


def run(app: Callable[[], object], args: Sequence[str]) -> None:
    """Run the CLI; after a local `eval` (torch loaded, the answer written), exit without the
    interpreter's teardown of torch's modules (~0.5 s an agent would wait for after the answer).
    The exit handlers still run (the forkserver nobody adopted, temporary folders, logging); the
    evaluator has already removed its work folders and ended its processes."""
    if not runs_local_eval(args):
        app()
        return
    try:
        app()
        code: object = 0
    except SystemExit as stop:
        code = stop.code
    _exit_now(code)


def _exit_now(code: object) -> None:
    import atexit

    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)  # what the interpreter does with SystemExit("message")
        code = 1
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away (`| head`), a closed stream
            pass
    atexit._run_exitfuncs()  # the interpreter's own exit handlers, without its module teardown
    os._exit(code or 0)


def main() -> None:
    """The console script `cuda-agent`."""
    args = sys.argv[1:]
    start_early_work(args)
    from cuda_agent.cli.main import app

    run(app, args)
