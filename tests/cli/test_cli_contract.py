"""The CLI contract, held by every command: exit codes, one-line errors, no tracebacks.

Commands are discovered from the typer app (``cuda_agent.cli.main.app``), so a command added
tomorrow is checked by the generic rows (``--help``, an unknown flag, a bad number for each
numeric option, a missing file for each input path) without touching this file. The explicit
rows cover what the generic ones cannot build: malformed files, busy sockets and ports, a
missing GPU, bad flag values that only the command's own checks catch.

Every row runs the real command in-process through the contract (`contract.run`) and asserts
the exit code, exactly one line on stderr that names the bad value, and no traceback.
"""

from __future__ import annotations

import json
import inspect
import socket
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import UnionType

import pytest
import typer
from typer.models import ArgumentInfo, OptionInfo, ParameterInfo

from cuda_agent.cli import contract
from cuda_agent.cli.main import app

MISSING = "/nonexistent/cuda_agent_contract/input"


# --- discovery -----------------------------------------------------------------------------------


@dataclass
class Param:
    """One parameter of a command, from its typer declaration."""

    name: str
    base: object
    info: ParameterInfo
    required: bool

    @property
    def is_argument(self) -> bool:
        return isinstance(self.info, ArgumentInfo)

    @property
    def flag(self) -> str:
        decls = [d for d in (self.info.param_decls or ()) if d.startswith("--")]
        return decls[0].split("/")[0] if decls else "--" + self.name.replace("_", "-")

    @property
    def scalar(self) -> object:
        """The element type: Optional[X] -> X, list[X] -> X."""
        base = self.base
        for _ in range(2):
            origin = typing.get_origin(base)
            if origin in (typing.Union, UnionType):
                base = next(a for a in typing.get_args(base) if a is not type(None))
            elif origin in (list, typing.List):  # noqa: UP006
                base = typing.get_args(base)[0]
        return base


@dataclass
class Command:
    path: tuple[str, ...]
    params: list[Param] = field(default_factory=list)

    @property
    def name(self) -> str:
        return " ".join(self.path)


def _commands(typer_app: typer.Typer, prefix: tuple[str, ...] = ()) -> Iterator[Command]:
    for info in typer_app.registered_commands:
        if info.hidden or info.callback is None:
            continue
        name = info.name or info.callback.__name__.replace("_", "-")
        yield Command((*prefix, name), list(_params(info.callback)))
    for group in typer_app.registered_groups:
        yield from _commands(group.typer_instance, (*prefix, group.name or group.typer_instance.info.name))


def _params(callback: typing.Callable) -> Iterator[Param]:
    hints = typing.get_type_hints(callback, include_extras=True)
    for name, parameter in inspect.signature(callback).parameters.items():
        annotation = hints.get(name, str)
        if typing.get_origin(annotation) is typing.Annotated:
            base, *meta = typing.get_args(annotation)
            info = next((m for m in meta if isinstance(m, ParameterInfo)), None)
            default = parameter.default
        else:
            base, info = annotation, parameter.default
            default = getattr(info, "default", None)
        if not isinstance(info, (ArgumentInfo, OptionInfo)) or getattr(info, "hidden", False):
            continue
        yield Param(name, base, info, default is ... or default is inspect.Parameter.empty)


COMMANDS = list(_commands(app))


def test_commands_are_discovered() -> None:
    names = {c.name for c in COMMANDS}
    assert {"init", "eval", "quickstart", "tool", "serve-reward", "pool serve", "pool status", "sandbox exec",
            "data filter"} <= names


# --- running a row ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str

    def error_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("CUDA_AGENT_POOL", raising=False)
    monkeypatch.delenv(contract.DEBUG_ENV, raising=False)
    monkeypatch.delenv("CUDA_AGENT_REWARD_TOKEN", raising=False)

    def invoke(*args: object) -> Outcome:
        capsys.readouterr()
        code = contract.run(app, [str(a) for a in args])
        out = capsys.readouterr()
        return Outcome(code, out.out, out.err)

    return invoke


def assert_one_line_error(outcome: Outcome, code: int, *names: str) -> None:
    """The contract for an error: exit code, the error as one line on stderr (its last; progress lines
    may come before it) naming the bad value, no traceback."""
    text = outcome.stdout + outcome.stderr
    assert "Traceback" not in text, text
    assert outcome.code == code, text
    lines = outcome.error_lines()
    errors = [line for line in lines if "error" in line.lower()]
    assert len(errors) == 1 and lines[-1] == errors[0], f"expected one error line, last on stderr:\n{outcome.stderr}"
    assert errors[0].startswith("cuda-agent") and "error:" in errors[0], errors[0]
    for name in names:
        assert name in errors[0], f"{name!r} is not named in: {errors[0]}"


def _fills(command: Command, tmp: Path, skip: str | None = None) -> tuple[list[str], list[str]]:
    """(options, arguments) giving every required parameter but `skip` a value that parses."""
    options: list[str] = []
    arguments: list[str] = []
    for param in command.params:
        if not param.required or param.name == skip:
            continue
        value = _valid_value(param, tmp)
        if param.is_argument:
            arguments.append(value)
        else:
            options += [param.flag, value]
    return options, arguments


def _valid_value(param: Param, tmp: Path) -> str:
    if param.scalar is Path:
        if getattr(param.info, "file_okay", True) is False:
            folder = tmp / f"dir_{param.name}"
            folder.mkdir(exist_ok=True)
            return str(folder)
        path = tmp / f"file_{param.name}.txt"
        path.write_text("placeholder\n")
        return str(path)
    if param.scalar in (int, float):
        return "1"
    return "true" if param.name == "cmd" else "x"


# --- generic rows: every command -------------------------------------------------------------------


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_help_exits_0(cli, command: Command) -> None:
    outcome = cli(*command.path, "--help")
    assert outcome.code == 0 and outcome.stdout.strip(), outcome.stderr
    assert "Traceback" not in outcome.stdout + outcome.stderr


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c.name)
def test_unknown_flag_is_a_usage_error(cli, command: Command, tmp_path: Path) -> None:
    options, arguments = _fills(command, tmp_path)
    as_json = ["--json"] if any(p.flag == "--json" for p in command.params) else []
    outcome = cli(*command.path, *as_json, "--no-such-flag", *options, *arguments)
    assert_one_line_error(outcome, 2, "--no-such-flag", "--help")
    assert outcome.stdout == "", "an error under --json leaves stdout empty"


NUMERIC = [(c, p) for c in COMMANDS for p in c.params if not p.is_argument and p.scalar in (int, float)]


@pytest.mark.parametrize(("command", "param"), NUMERIC, ids=lambda v: v.name if isinstance(v, (Command, Param)) else "")
def test_bad_number_is_a_usage_error(cli, command: Command, param: Param, tmp_path: Path) -> None:
    options, arguments = _fills(command, tmp_path)
    outcome = cli(*command.path, param.flag, "notanumber", *options, *arguments)
    assert_one_line_error(outcome, 2, "notanumber", param.flag)


INPUT_PATHS = [(c, p) for c in COMMANDS for p in c.params
               if p.scalar is Path and getattr(p.info, "exists", False)]


@pytest.mark.parametrize(("command", "param"), INPUT_PATHS, ids=lambda v: v.name if isinstance(v, (Command, Param)) else "")
def test_missing_input_file_is_a_usage_error(cli, command: Command, param: Param, tmp_path: Path) -> None:
    options, arguments = _fills(command, tmp_path, skip=param.name)
    if param.is_argument:
        position = [p.name for p in command.params if p.required and p.is_argument].index(param.name)
        arguments.insert(position, MISSING)
    else:
        options += [param.flag, MISSING]
    outcome = cli(*command.path, *options, *arguments)
    assert_one_line_error(outcome, 2, MISSING)


# --- explicit rows: malformed files, busy sockets, missing GPU, values only the command checks -----


@pytest.fixture
def inputs(tmp_path: Path) -> dict[str, Path]:
    """Malformed and valid inputs, by name."""
    files = {
        "syntax.py": "class Model(:\n",
        "no_inputs.py": "import torch\n\nclass Model(torch.nn.Module):\n    pass\n",
        "broken.jsonl": '{"id": "a", broken\n{"id": "b"}\n',
        "empty.jsonl": "",
        "garbage.parquet": "not a parquet file\n",
        "bad.yaml": "sandbox: [unclosed\n",
    }
    paths = {name.replace(".", "_"): tmp_path / name for name in files}
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "not_a_workspace").mkdir()
    paths["not_a_workspace"] = tmp_path / "not_a_workspace"
    workspace = tmp_path / "ws_missing_import"
    from cuda_agent.sandbox_pool.workspace import create_workspace

    problem = (Path(__file__).resolve().parents[2] / "examples" / "problems" / "diag_matmul.py").read_text()
    create_workspace("import no_such_module_for_contract\n" + problem, workspace, "cpu")
    paths["ws_missing_import"] = workspace
    create_workspace(problem, tmp_path / "ws", "cpu")
    paths["ws"] = tmp_path / "ws"
    return paths


@pytest.fixture
def busy_socket(tmp_path: Path) -> Iterator[Path]:
    """A unix socket something listens on."""
    path = tmp_path / "busy.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    yield path
    server.close()


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A TCP port on 127.0.0.1 something listens on."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    yield server.getsockname()[1]
    server.close()


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


# (id, argv with {placeholders}, exit code, words the one line must contain)
ROWS: list[tuple[str, list[str], int, list[str]]] = [
    ("init-syntax-error", ["init", "{syntax_py}", "{tmp}/w1", "--device", "cpu"], 2, ["syntax.py", "line 1"]),
    ("init-no-get-inputs", ["init", "{no_inputs_py}", "{tmp}/w2", "--device", "cpu"], 2, ["get_inputs"]),
    ("init-bad-device", ["init", "{syntax_py}", "{tmp}/w3", "--device", "tpu"], 2, []),
    ("eval-not-a-workspace", ["eval", "{not_a_workspace}"], 2, ["not_a_workspace"]),
    ("eval-problem-does-not-import", ["eval", "{ws_missing_import}", "--json"], 2, ["no_such_module_for_contract"]),
    ("eval-bad-policy", ["eval", "{ws}", "--precision-policy", "loose"], 2, ["loose", "--precision-policy"]),
    ("eval-timed-calls-too-few", ["eval", "{ws}", "--timed-calls", "1"], 2, ["timed_calls"]),
    ("eval-unreachable-pool", ["eval", "{ws}", "--pool", "{tmp}/no_pool.sock"], 3, ["no_pool.sock"]),
    ("pool-serve-busy-socket", ["pool", "serve", "--device", "cpu", "--socket", "{busy_socket}"], 2, ["busy.sock"]),
    ("pool-serve-bad-workers", ["pool", "serve", "--device", "cpu", "--cpu-workers", "0"], 2, ["cpu_workers"]),
    ("pool-serve-bad-mode", ["pool", "serve", "--device", "cpu", "--socket-mode", "9z"], 2, ["9z"]),
    ("pool-status-no-pool", ["pool", "status", "--address", "{tmp}/none.sock"], 3, ["none.sock"]),
    ("pool-status-no-address", ["pool", "status"], 2, ["--address", "CUDA_AGENT_POOL"]),
    ("data-filter-broken-jsonl", ["data", "filter", "{broken_jsonl}", "--device", "cpu", "--out", "{tmp}/f"], 2,
     ["broken.jsonl:1"]),
    ("data-export-empty-jsonl", ["data", "export", "{empty_jsonl}", "--device", "cpu", "--out", "{tmp}/e"], 2,
     ["empty.jsonl"]),
    ("serve-reward-missing-tasks", ["serve-reward", "--device", "cpu", "--tasks", "{tmp}/none.parquet"], 2,
     ["none.parquet"]),
    ("serve-reward-garbage-tasks", ["serve-reward", "--device", "cpu", "--tasks", "{garbage_parquet}"], 2,
     ["garbage.parquet"]),
    ("serve-reward-busy-port", ["serve-reward", "--device", "cpu", "--port", "{busy_port}"], 2, ["{busy_port}"]),
    ("serve-reward-public-without-token", ["serve-reward", "--device", "cpu", "--host", "0.0.0.0"], 2, ["token"]),
    ("serve-reward-bad-kind", ["serve-reward", "--device", "cpu", "--reward-kind", "best"], 2, ["best"]),
    ("sandbox-exec-bad-yaml", ["sandbox", "exec", "--config", "{bad_yaml}", "{ws}", "true"], 2, ["YAML"]),
]

GPU_ROWS: list[tuple[str, list[str]]] = [
    ("eval", ["eval", "{ws}", "--device", "cuda"]),
    ("quickstart", ["quickstart", "--device", "cuda"]),
    ("pool-serve", ["pool", "serve", "--device", "cuda", "--socket", "{tmp}/gpu.sock"]),
    ("serve-reward", ["serve-reward", "--device", "cuda", "--port", "0"]),
]


def _fill(argv: list[str], values: dict[str, object]) -> list[str]:
    return [arg.format(**values) for arg in argv]


@pytest.mark.parametrize(("argv", "code", "words"), [row[1:] for row in ROWS], ids=[row[0] for row in ROWS])
def test_bad_input_rows(cli, inputs, busy_socket, busy_port, tmp_path, argv, code, words) -> None:
    values = {**inputs, "tmp": tmp_path, "busy_socket": busy_socket, "busy_port": busy_port}
    outcome = cli(*_fill(argv, values))
    assert_one_line_error(outcome, code, *_fill(words, values))
    if "--json" in argv:
        assert outcome.stdout == "", "an error under --json leaves stdout empty"


@pytest.mark.skipif(_has_gpu(), reason="a GPU is visible: --device cuda is valid here")
@pytest.mark.parametrize("argv", [row[1] for row in GPU_ROWS], ids=[row[0] for row in GPU_ROWS])
def test_missing_gpu_is_a_usage_error(cli, inputs, tmp_path, argv) -> None:
    outcome = cli(*_fill(argv, {"ws": inputs["ws"], "tmp": tmp_path}))
    assert_one_line_error(outcome, 2, "no GPU", "--device cpu")


def test_debug_shows_the_traceback(cli, inputs) -> None:
    outcome = cli("--debug", "init", inputs["syntax_py"], inputs["ws"].parent / "w9", "--device", "cpu")
    assert outcome.code == 2 and "Traceback" in outcome.stderr
    assert outcome.error_lines()[-1].startswith("cuda-agent: error:")
    contract.set_debug(False)


def test_json_stdout_keeps_stdout_for_the_json(capfd: pytest.CaptureFixture[str]) -> None:
    """Output of code run under --json (prints, C code writing to fd 1) goes to stderr."""
    import os

    with contract.json_stdout() as stdout:
        print("noise from a problem file")
        os.write(1, b"noise from C code\n")
        stdout.write('{"ok": true}\n')
    out, err = capfd.readouterr()
    assert out == '{"ok": true}\n'
    assert "noise from a problem file" in err and "noise from C code" in err


# --- the translation table itself ------------------------------------------------------------------


def _permission_error() -> PermissionError:
    return PermissionError(13, "Permission denied", "/srv/ws/model_new.py")


@pytest.mark.parametrize(
    ("exc", "code", "words"),
    [
        (lambda: __import__("cuda_agent.errors").errors.ConfigError("bad --x"), 2, ["bad --x"]),
        (lambda: __import__("cuda_agent.errors").errors.WorkspaceError("not a workspace"), 2, ["not a workspace"]),
        (lambda: __import__("cuda_agent.errors").errors.ProblemError("no Model"), 2, ["no Model"]),
        (lambda: __import__("cuda_agent.errors").errors.InfraError("worker died"), 3, ["infrastructure", "worker died"]),
        (lambda: __import__("cuda_agent.errors").errors.SandboxUnavailableError("no engine"), 3, ["no engine"]),
        (lambda: __import__("cuda_agent.errors").errors.PoolOverloadedError("queue full"), 3, ["queue full"]),
        (_permission_error, 2, ["permission denied", "/srv/ws/model_new.py", "chown"]),
        (lambda: FileNotFoundError(2, "No such file or directory", "/x/y"), 2, ["/x/y"]),
        (lambda: OSError(98, "Address already in use"), 2, ["already in use"]),
        (lambda: __import__("json").JSONDecodeError("Expecting value", "{x", 1), 2, ["invalid JSON"]),
        (lambda: ModuleNotFoundError("No module named 'fastapi'", name="fastapi"), 3, ["fastapi", "install"]),
        (lambda: KeyError("our bug"), 1, ["internal error", "--debug"]),
    ],
    ids=["config", "workspace", "problem", "infra", "sandbox", "pool", "permission", "missing-file", "addr-in-use",
         "json", "missing-dependency", "bug"],
)
def test_classify(exc, code: int, words: list[str]) -> None:
    got_code, message = contract.classify(exc())
    assert got_code == code and "\n" not in message
    assert all(word in message for word in words), message


def test_validation_errors_become_field_messages() -> None:
    from pydantic import BaseModel, Field, ValidationError

    class Options(BaseModel):
        workers: int = Field(ge=1)

    with pytest.raises(ValidationError) as info:
        Options(workers=0)
    code, message = contract.classify(info.value)
    assert code == 2 and message == "invalid Options: workers: Input should be greater than or equal to 1 (got 0)"


def test_defences_lists_shows_and_refuses_an_unknown_id(cli) -> None:
    listed = cli("defences", "--json")
    assert listed.code == 0 and len(json.loads(listed.stdout)) >= 26
    one = cli("defences", "stale_memory")
    assert one.code == 0 and "must fail" in one.stdout and "check_fresh" in one.stdout
    assert_one_line_error(cli("defences", "no_such_defence"), 2, "no_such_defence")


def test_a_logged_exception_keeps_its_type_and_message_without_the_traceback(capsys) -> None:
    """A server's log line of a failure names its cause (one line), the traceback only with --debug."""
    import logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    contract.set_debug(False)
    contract.configure_logging()
    try:
        raise RuntimeError("Deadlock: lock '/x/.lock' is already held\nsecond line")
    except RuntimeError:
        logging.getLogger("cuda_agent.sandbox_pool.pool.protocol").exception("the pool failed on a %s request", "compile")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["ERROR cuda_agent.sandbox_pool.pool.protocol: the pool failed on a compile request: RuntimeError: "
                   "Deadlock: lock '/x/.lock' is already held"], err
