"""Read, Write, Edit and MultiEdit, their happy paths and every refusal."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cuda_agent.tools import ToolErrorKind, ToolSession, ToolsConfig, call_tool


async def test_read_numbers_lines_like_cat_n(session: ToolSession) -> None:
    obs = await call_tool(session, "Read", {"file_path": "model.py"})
    assert not obs.is_error
    lines = obs.text.splitlines()
    assert lines[0] == "     1\timport torch"
    assert lines[4] == "     5\tclass Model(nn.Module):"


async def test_read_offset_limit_and_continuation(session: ToolSession, workspace: Path) -> None:
    (workspace / "long.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    obs = await call_tool(session, "Read", {"file_path": "long.txt", "offset": 10, "limit": 3})
    assert obs.text.splitlines()[:3] == ["    10\tline 10", "    11\tline 11", "    12\tline 12"]
    assert "showing lines 10-12 of 100; continue with offset=13" in obs.text


async def test_read_past_end_and_empty(session: ToolSession, workspace: Path) -> None:
    obs = await call_tool(session, "Read", {"file_path": "model.py", "offset": 999})
    assert obs.is_error and obs.error is ToolErrorKind.INVALID_ARGUMENTS and "has 19 lines" in obs.text
    (workspace / "empty.txt").write_text("")
    obs = await call_tool(session, "Read", {"file_path": "empty.txt"})
    assert not obs.is_error and "is empty" in obs.text


async def test_read_truncates_long_lines(session: ToolSession, workspace: Path) -> None:
    (workspace / "wide.txt").write_text("x" * 5000 + "\nshort\n")
    obs = await call_tool(session, "Read", {"file_path": "wide.txt"})
    assert "[line truncated: 5000 characters]" in obs.text and "short" in obs.text


async def test_read_pages_output_over_budget(workspace: Path, sandbox) -> None:
    small = ToolSession(sandbox, ToolsConfig(max_output_chars=2000))
    (workspace / "big.txt").write_text("".join(f"{'y' * 50} {i}\n" for i in range(500)))
    obs = await call_tool(small, "Read", {"file_path": "big.txt"})
    assert len(obs.text) <= 2000 and "continue with offset=" in obs.text


async def test_read_refuses_binary_huge_missing_and_directories(workspace: Path, sandbox) -> None:
    session = ToolSession(sandbox, ToolsConfig(read_max_file_bytes=1000))
    (workspace / "blob.so").write_bytes(b"\x7fELF\x00\x01\x02")
    (workspace / "huge.txt").write_text("z" * 2000)
    cases = {
        "blob.so": (ToolErrorKind.BINARY_FILE, "xxd"),
        "huge.txt": (ToolErrorKind.TOO_LARGE, "head -n"),
        "nope.py": (ToolErrorKind.NOT_FOUND, "Glob"),
        "kernels": (ToolErrorKind.IS_DIRECTORY, "ls kernels"),
    }
    for path, (kind, hint) in cases.items():
        obs = await call_tool(session, "Read", {"file_path": path})
        assert obs.is_error and obs.error is kind and hint in obs.text, (path, obs)


@pytest.mark.parametrize(
    "path",
    ["../outside.txt", "kernels/../../outside.txt", "/etc/passwd", "~/x", ""],
)
async def test_paths_outside_the_workspace_are_refused(session: ToolSession, path: str) -> None:
    for name, args in [("Read", {"file_path": path}), ("Write", {"file_path": path, "content": "x"})]:
        obs = await call_tool(session, name, args)
        assert obs.is_error and obs.error is ToolErrorKind.BAD_PATH, obs


async def test_symlink_escape_is_refused(session: ToolSession, workspace: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    os.symlink(secret, workspace / "link.txt")
    os.symlink(tmp_path, workspace / "linkdir")
    for args in [{"file_path": "link.txt"}, {"file_path": "linkdir/secret.txt"}]:
        obs = await call_tool(session, "Read", args)
        assert obs.is_error and obs.error is ToolErrorKind.BAD_PATH and "symbolic link" in obs.text
    obs = await call_tool(session, "Write", {"file_path": "link.txt", "content": "pwned"})
    assert obs.is_error and secret.read_text() == "secret"


async def test_absolute_path_inside_workspace_is_accepted(session: ToolSession, workspace: Path) -> None:
    obs = await call_tool(session, "Read", {"file_path": str(workspace / "model_new.py")})
    assert not obs.is_error and "class ModelNew" in obs.text


async def test_write_creates_parents_and_overwrites(session: ToolSession, workspace: Path) -> None:
    obs = await call_tool(session, "Write", {"file_path": "kernels/deep/add.cu", "content": "a\nb\n"})
    assert not obs.is_error and obs.text.startswith("Created kernels/deep/add.cu (2 lines")
    assert (workspace / "kernels/deep/add.cu").read_text() == "a\nb\n"
    obs = await call_tool(session, "Write", {"file_path": "./kernels/deep/add.cu", "content": "c"})
    assert obs.text.startswith("Overwrote") and (workspace / "kernels/deep/add.cu").read_text() == "c"


@pytest.mark.parametrize("path", ["SKILL.md", "model.py", "binding.cpp", "binding_registry.h", "utils/compile.sh",
                                  "utils/new.py", "kernels/../model.py"])
async def test_protected_files_are_refused_for_writes(session: ToolSession, workspace: Path, path: str) -> None:
    before = (workspace / "model.py").read_text()
    calls = [
        ("Write", {"file_path": path, "content": "x"}),
        ("Edit", {"file_path": path, "old_string": "torch", "new_string": "numpy"}),
        ("MultiEdit", {"file_path": path, "edits": [{"old_string": "torch", "new_string": "numpy"}]}),
    ]
    for name, args in calls:
        obs = await call_tool(session, name, args)
        assert obs.is_error and obs.error is ToolErrorKind.PROTECTED_PATH and "protected" in obs.text
    assert (workspace / "model.py").read_text() == before


async def test_protected_file_via_symlink_is_refused(session: ToolSession, workspace: Path) -> None:
    os.symlink("model.py", workspace / "alias.py")
    obs = await call_tool(session, "Write", {"file_path": "alias.py", "content": "x"})
    assert obs.error is ToolErrorKind.PROTECTED_PATH


async def test_reading_protected_files_is_allowed(session: ToolSession) -> None:
    assert not (await call_tool(session, "Read", {"file_path": "utils/compile.sh"})).is_error


async def test_edit_unique_match_shows_snippet(session: ToolSession, workspace: Path) -> None:
    obs = await call_tool(
        session, "Edit", {"file_path": "model_new.py", "old_string": "    pass", "new_string": "    scale = 1"}
    )
    assert not obs.is_error and "1 replacement" in obs.text and "\tscale = 1" in obs.text.replace("    scale", "scale")
    assert "scale = 1" in (workspace / "model_new.py").read_text()


async def test_edit_zero_and_several_matches_teach(session: ToolSession, workspace: Path) -> None:
    obs = await call_tool(session, "Edit", {"file_path": "model.py", "old_string": "a", "new_string": "b"})
    assert obs.error is ToolErrorKind.PROTECTED_PATH
    (workspace / "k.cu").write_text("int a;\nint a;\n    float  x;\n")
    obs = await call_tool(session, "Edit", {"file_path": "k.cu", "old_string": "int a;", "new_string": "int b;"})
    assert obs.error is ToolErrorKind.AMBIGUOUS_MATCH and "2 times" in obs.text and "lines 1, 2" in obs.text
    assert "replace_all" in obs.text
    obs = await call_tool(session, "Edit", {"file_path": "k.cu", "old_string": "double z;", "new_string": "y"})
    assert obs.error is ToolErrorKind.NO_MATCH and "Read the file again" in obs.text
    obs = await call_tool(session, "Edit", {"file_path": "k.cu", "old_string": "\tfloat x;", "new_string": "y"})
    assert obs.error is ToolErrorKind.NO_MATCH and "ignoring indentation/whitespace exists at line 3" in obs.text
    obs = await call_tool(session, "Edit", {"file_path": "k.cu", "old_string": "     1\tint a;", "new_string": "y"})
    assert obs.error is ToolErrorKind.NO_MATCH and "line-number prefix" in obs.text
    obs = await call_tool(session, "Edit", {"file_path": "k.cu", "old_string": "int a;", "new_string": "int a;"})
    assert obs.error is ToolErrorKind.NO_CHANGE
    assert (workspace / "k.cu").read_text() == "int a;\nint a;\n    float  x;\n"
    obs = await call_tool(
        session, "Edit", {"file_path": "k.cu", "old_string": "int a;", "new_string": "int b;", "replace_all": True}
    )
    assert not obs.is_error and "2 replacement" in obs.text
    assert (workspace / "k.cu").read_text() == "int b;\nint b;\n    float  x;\n"


async def test_edit_missing_file_and_creation_with_empty_old_string(session: ToolSession, workspace: Path) -> None:
    obs = await call_tool(session, "Edit", {"file_path": "new.cu", "old_string": "x", "new_string": "y"})
    assert obs.error is ToolErrorKind.NOT_FOUND and "Write" in obs.text
    obs = await call_tool(session, "Edit", {"file_path": "kernels/new.cu", "old_string": "", "new_string": "int x;\n"})
    assert not obs.is_error and (workspace / "kernels/new.cu").read_text() == "int x;\n"
    obs = await call_tool(session, "Edit", {"file_path": "kernels/new.cu", "old_string": "", "new_string": "y"})
    assert obs.error is ToolErrorKind.INVALID_ARGUMENTS


async def test_multiedit_applies_in_order(session: ToolSession, workspace: Path) -> None:
    (workspace / "k.cu").write_text("alpha beta\ngamma\n")
    edits = [
        {"old_string": "alpha", "new_string": "ALPHA"},
        {"old_string": "ALPHA beta", "new_string": "one"},
        {"old_string": "a", "new_string": "4", "replace_all": True},
    ]
    obs = await call_tool(session, "MultiEdit", {"file_path": "k.cu", "edits": edits})
    assert not obs.is_error and "3 edit(s)" in obs.text
    assert (workspace / "k.cu").read_text() == "one\ng4mm4\n"


async def test_multiedit_is_atomic(session: ToolSession, workspace: Path) -> None:
    (workspace / "k.cu").write_text("alpha beta\n")
    edits = [{"old_string": "alpha", "new_string": "A"}, {"old_string": "missing", "new_string": "B"}]
    obs = await call_tool(session, "MultiEdit", {"file_path": "k.cu", "edits": edits})
    assert obs.error is ToolErrorKind.NO_MATCH and "Edit 2 of 2 failed, so no edit was applied" in obs.text
    assert (workspace / "k.cu").read_text() == "alpha beta\n"
    obs = await call_tool(session, "MultiEdit", {"file_path": "k.cu", "edits": []})
    assert obs.error is ToolErrorKind.INVALID_ARGUMENTS


async def test_multiedit_creates_a_file(session: ToolSession, workspace: Path) -> None:
    edits = [{"old_string": "", "new_string": "a b"}, {"old_string": "b", "new_string": "c"}]
    obs = await call_tool(session, "MultiEdit", {"file_path": "kernels/x.cpp", "edits": edits})
    assert not obs.is_error and (workspace / "kernels/x.cpp").read_text() == "a c"


async def test_parallel_edits_of_one_file_do_not_lose_updates(session: ToolSession, workspace: Path) -> None:
    import asyncio

    (workspace / "k.cu").write_text("".join(f"v{i}\n" for i in range(20)))
    calls = [
        call_tool(session, "Edit", {"file_path": "k.cu", "old_string": f"v{i}\n", "new_string": f"w{i}\n"})
        for i in range(20)
    ]
    assert not any(obs.is_error for obs in await asyncio.gather(*calls))
    assert (workspace / "k.cu").read_text() == "".join(f"w{i}\n" for i in range(20))


async def test_absolute_paths_as_the_sandbox_shows_them(session: ToolSession) -> None:
    cwd = (await call_tool(session, "Bash", {"command": "pwd"})).text.strip()
    obs = await call_tool(session, "Read", {"file_path": f"{cwd}/model_new.py"})
    assert not obs.is_error and "class ModelNew" in obs.text, (cwd, obs.text)
    obs = await call_tool(session, "Write", {"file_path": f"{cwd}/kernels/abs.cu", "content": "x"})
    assert not obs.is_error and "kernels/abs.cu" in obs.text


async def test_the_sandbox_sees_what_the_tools_wrote(session: ToolSession) -> None:
    await call_tool(session, "Write", {"file_path": "kernels/seen.cu", "content": "int seen;\n"})
    assert (await call_tool(session, "Bash", {"command": "cat kernels/seen.cu"})).text == "int seen;"
    await call_tool(session, "Bash", {"command": "echo 'made inside' > kernels/inside.txt"})
    assert (await call_tool(session, "Read", {"file_path": "kernels/inside.txt"})).text == "     1\tmade inside"
