"""The one contract of every ``cuda-agent`` command and subcommand.

- exit 0 only on success;
- a usage or input error (bad flag value, missing or malformed file, busy socket, no GPU for
  ``--device cuda``): one line on stderr naming the bad value and what to do, exit 2;
- an infrastructure failure (the evaluator, a sandbox, the pool, a missing dependency): one
  line, exit 3; our own bug: one line, exit 1;
- never a traceback, unless ``cuda-agent --debug`` (or ``CUDA_AGENT_DEBUG=1``) asks for it;
- ``--json`` output is the only thing on stdout (`json_stdout`); progress goes to stderr.

Commands raise exceptions from `cuda_agent.errors` (or let common foreign ones through);
`contained` translates them once, here, for the whole command tree: the top-level app is
built with ``typer.Typer(cls=ContractGroup)``, whose ``main`` (the console script, click's
test runner) goes through it; groups mounted below it inherit the contract.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any

import typer
from typer.core import TyperGroup

try:  # typer >= 0.20 ships its own copy of click; its exceptions are the ones raised
    from typer._click.exceptions import ClickException, NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - older typer on plain click
    from click.exceptions import ClickException, NoArgsIsHelpError, UsageError


def _exit_and_abort() -> tuple[tuple[type, ...], tuple[type, ...]]:
    exits: list[type] = [typer.Exit]
    aborts: list[type] = [typer.Abort]
    try:
        import click

        exits.append(click.exceptions.Exit)
        aborts.append(click.exceptions.Abort)
    except ImportError:  # pragma: no cover
        pass
    return tuple(exits), tuple(aborts)


_EXITS, _ABORTS = _exit_and_abort()

from cuda_agent.errors import (
    ConfigError,
    CudaAgentError,
    InfraError,
    PoolError,
    ProblemError,
    SandboxError,
    ToolCallError,
    WorkspaceError,
)

EXIT_OK = 0
EXIT_FAILURE = 1
"""Our own bug (an exception nobody translated)."""
EXIT_USAGE = 2
"""A usage or input error: the user can fix it from the message."""
EXIT_INFRA = 3
"""An infrastructure failure: evaluator, sandbox, pool, environment."""
EXIT_INTERRUPTED = 130

DEBUG_ENV = "CUDA_AGENT_DEBUG"
"""Set to 1 to print tracebacks (the same as ``cuda-agent --debug``)."""

MAX_MESSAGE_CHARS = 600

_state = {"debug": False}


def set_debug(enabled: bool) -> None:
    """Show tracebacks of errors (``--debug``)."""
    _state["debug"] = enabled


def debug_enabled() -> bool:
    return _state["debug"] or os.environ.get(DEBUG_ENV, "") not in ("", "0")


def one_line(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """`text` on one line (whitespace runs collapsed), cut to `limit` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def validation_message(exc: Any) -> str:
    """pydantic's ValidationError as 'field: problem (got value)' items, without its URLs."""
    items = []
    for error in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in error.get("loc", ()))
        got = error.get("input")
        shown = "" if isinstance(got, dict) else f" (got {got!r})"
        items.append(f"{loc + ': ' if loc and loc != 'value' else ''}{error.get('msg', 'invalid')}{shown}")
    return "; ".join(items)


def classify(exc: BaseException) -> tuple[int, str]:
    """(exit code, one-line message) of an exception that ended a command."""
    from pydantic import ValidationError

    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED, "interrupted"
    if isinstance(exc, (ConfigError, ProblemError, WorkspaceError, ToolCallError)):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, (InfraError, SandboxError, PoolError)):
        return EXIT_INFRA, f"infrastructure failure: {exc}"
    if isinstance(exc, CudaAgentError):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, ValidationError):
        return EXIT_USAGE, f"invalid {exc.title}: {validation_message(exc)}"
    if isinstance(exc, json.JSONDecodeError):
        return EXIT_USAGE, f"invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); fix the input"
    if isinstance(exc, PermissionError):
        return EXIT_USAGE, permission_message(exc)
    if isinstance(exc, (FileNotFoundError, NotADirectoryError, IsADirectoryError)):
        return EXIT_USAGE, f"{exc.strerror or type(exc).__name__}: {exc.filename}; check the path"
    if isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        return EXIT_USAGE, f"address already in use ({exc}); stop the other server or choose another port/socket"
    if type(exc).__module__.startswith("yaml"):  # yaml.YAMLError and its kinds: a malformed file
        return EXIT_USAGE, f"invalid YAML ({exc}); fix the file"
    if isinstance(exc, ModuleNotFoundError):
        return EXIT_INFRA, (f"missing dependency {exc.name!r}; install it (`bash scripts/setup.sh`, or "
                            f"`.venv/bin/python -m pip install -e '.[verl,service]'`)")
    if isinstance(exc, UnicodeDecodeError):
        return EXIT_USAGE, f"not UTF-8 text ({exc.reason} at byte {exc.start}); pass a text file"
    return EXIT_FAILURE, (f"internal error: {type(exc).__name__}: {exc} (a bug: rerun with `cuda-agent --debug` "
                          f"for the traceback and report it)")


def permission_message(exc: PermissionError) -> str:
    """A permission error with the fix: most often a workspace another uid owns."""
    path = exc.filename or ""
    owner = ""
    with contextlib.suppress(OSError, TypeError):
        uid = os.stat(path).st_uid
        if uid != os.getuid():
            owner = f" (owned by uid {uid}, you are uid {os.getuid()})"
    return (f"permission denied: {path or exc}{owner}; make it yours again, e.g. "
            f"`sudo chown -R $(id -u):$(id -g) {path or 'PATH'}`, or use a fresh directory")


def usage_message(exc: UsageError) -> str:
    """click's usage error on one line, pointing at the command's --help."""
    cause = exc.__cause__
    from pydantic import ValidationError

    text = exc.format_message()
    if isinstance(cause, ValidationError):
        param = getattr(exc, "param", None)
        names = (getattr(param, "opts", None) or [getattr(param, "name", None)]) if param is not None else []
        hint = " / ".join(f"'{name}'" for name in names if name) or None
        text = f"Invalid value for {hint}: {validation_message(cause)}" if hint else \
            f"invalid option value: {validation_message(cause)}"
    path = exc.ctx.command_path if exc.ctx is not None else "cuda-agent"
    return f"{text} (see `{path} --help`)"


def report(message: str, prog: str = "cuda-agent") -> None:
    """Print the one error line on stderr."""
    sys.stderr.write(f"{prog}: error: {one_line(message)}\n")
    sys.stderr.flush()


def run(app: typer.Typer, args: Sequence[str] | None = None, prog_name: str = "cuda-agent") -> int:
    """Run `app` on `args` (default sys.argv[1:]) under the contract; returns the exit code."""
    command = typer.main.get_command(app)
    if isinstance(command, ContractGroup):
        return command.main(args=list(args) if args is not None else None, prog_name=prog_name,
                            standalone_mode=False)
    return contained(lambda: command.main(args=list(args) if args is not None else None, prog_name=prog_name,
                                          standalone_mode=False), prog_name)


def contained(main: Callable[[], Any], prog_name: str) -> int:
    """Call a click ``main(standalone_mode=False)``; every way it can end becomes an exit code and
    at most one line on stderr."""
    try:
        value = main()
    except NoArgsIsHelpError as exc:  # bare group: its help, as click does
        if exc.ctx is not None:
            typer.echo(exc.ctx.get_help(), err=True)
        return EXIT_USAGE
    except _EXITS as exc:
        return exc.exit_code
    except _ABORTS:
        report("interrupted", prog_name)
        return EXIT_INTERRUPTED
    except UsageError as exc:
        _traceback()
        report(usage_message(exc), prog_name)
        return EXIT_USAGE
    except ClickException as exc:
        _traceback()
        report(exc.format_message(), prog_name)
        return exc.exit_code or EXIT_FAILURE
    except (Exception, KeyboardInterrupt) as exc:  # the one boundary: every error becomes one line
        code, message = classify(exc)
        _traceback()
        report(message, prog_name)
        return code
    return value if isinstance(value, int) and not isinstance(value, bool) else EXIT_OK


def _traceback() -> None:
    if debug_enabled():
        traceback.print_exc(file=sys.stderr)


class ContractGroup(TyperGroup):
    """The click group of a Typer app (``typer.Typer(cls=ContractGroup)``) whose ``main`` keeps the
    contract however it is called: the console script, ``python -m``, click's test runner."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,  # type: ignore[override]
             complete_var: str | None = None, standalone_mode: bool = True, **extra: Any) -> Any:
        name = prog_name or self.name or "cuda-agent"
        code = contained(lambda: super(ContractGroup, self).main(
            args=args, prog_name=prog_name, complete_var=complete_var, standalone_mode=False, **extra), name)
        if standalone_mode:
            sys.exit(code)
        return code


def require_device(device: str, flag: str = "--device") -> None:
    """A usage error unless `device` is cpu, or cuda with a visible GPU."""
    if device not in ("cpu", "cuda"):
        raise ConfigError(f"{flag} {device!r} is not a device; use cpu or cuda")
    if device == "cuda" and not _driver_lists_a_gpu():  # the driver's word is enough: no torch import
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(f"{flag} cuda but no GPU is visible on this machine; use {flag} cpu, or run on a "
                              "GPU node (check nvidia-smi and CUDA_VISIBLE_DEVICES)")


def _driver_lists_a_gpu() -> bool:
    """True when the NVIDIA driver lists a GPU and CUDA_VISIBLE_DEVICES does not hide them all
    (read from /proc in microseconds; `require_device` falls back to torch otherwise)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    try:
        return any(os.scandir("/proc/driver/nvidia/gpus"))
    except OSError:
        return False


@contextlib.contextmanager
def json_stdout(enabled: bool = True) -> Iterator[IO[str]]:
    """While active, anything written to stdout (fd 1: Python, C code, child processes) goes to
    stderr; the yielded stream writes to the real stdout, so ``--json`` output stays alone there."""
    if not enabled:
        yield sys.stdout
        return
    try:
        sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # an in-memory stdout (click's test runner)
        original = sys.stdout
        with contextlib.redirect_stdout(sys.stderr):
            yield original
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        real = open(saved, "w", closefd=False, encoding="utf-8")  # noqa: SIM115 - closed below
        with contextlib.redirect_stdout(sys.stderr):
            try:
                yield real
            finally:
                real.flush()
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


@contextlib.contextmanager
def progress(message: str) -> Iterator[None]:
    """Show that a long step runs: a spinner on a terminal, else one line; both on stderr, then
    the step's duration once it succeeded."""
    from rich.console import Console

    console = Console(stderr=True)
    started = time.monotonic()
    if console.is_terminal:
        with console.status(f"{message} ..."):
            yield
    else:
        console.print(f"{message} ...", markup=False, highlight=False, soft_wrap=True)
        yield
    console.print(f"{message}: done in {time.monotonic() - started:.1f} s", markup=False, highlight=False,
                  style="dim", soft_wrap=True)


class _Formatter(logging.Formatter):
    """Log records as one line each, an exception's type and message at its end; the traceback only with
    --debug (a server's log said "the pool failed on a compile request" and nothing of why, before)."""

    def format(self, record: logging.LogRecord) -> str:
        if not debug_enabled() and (record.exc_info or record.exc_text):
            exc = record.exc_info[1] if record.exc_info else None
            cause = f": {type(exc).__name__}: {_first_line(str(exc))}" if exc is not None else ""
            record = logging.makeLogRecord({**record.__dict__, "msg": f"{record.getMessage()}{cause}", "args": None,
                                            "exc_info": None, "exc_text": None})
        return super().format(record)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def configure_logging() -> None:
    """Warnings (and, with --debug, info) of the library on stderr, without tracebacks unless --debug.
    Commands that want their own logging (``data -v``) replace it with ``logging.basicConfig(force=True)``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if debug_enabled() else logging.WARNING, handlers=[handler], force=True)
