"""The pool's compile cache inside a sandbox: readable at the same path, never writable."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.errors import ConfigError
from cuda_agent.sandbox_pool.terminal.config import shared_cache_mounts


async def test_sandbox_reads_but_cannot_write_the_shared_compile_cache(make_sandbox, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(tmp_path / "cache"))  # the default: compile_cache="auto"
    cache = (tmp_path / "cache" / "build").resolve()
    built = cache / "tc" / "so" / "k1"
    built.mkdir(parents=True)
    (built / "cuda_extension.so").write_bytes(b"trusted build")
    sandbox = await make_sandbox()
    so = built / "cuda_extension.so"
    read = await sandbox.run(f"cat {so}")
    assert read.exit_code == 0 and read.stdout == "trusted build", read
    for attack in (f"echo poisoned > {so}", f"echo x > {built}/other.o", f"rm -f {so}",
                   f"mkdir {cache}/tc/so/k2", f"mv {so} {built}/moved.so"):
        result = await sandbox.run(attack)
        assert result.exit_code != 0, f"{attack!r} succeeded inside the sandbox"
    copied = await sandbox.run(f"cp {so} /workspace/cuda_extension.so && cat /workspace/cuda_extension.so")
    assert copied.exit_code == 0 and copied.stdout == "trusted build", copied
    assert so.read_bytes() == b"trusted build"
    assert sorted(p.name for p in built.iterdir()) == ["cuda_extension.so"]


def test_shared_cache_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_AGENT_CACHE", str(tmp_path / "c"))
    build = str((tmp_path / "c" / "build").resolve())
    assert shared_cache_mounts("auto") == {build: build}
    assert Path(build).is_dir()
    assert shared_cache_mounts(None) == {}
    with pytest.raises(ConfigError, match="not a folder"):
        shared_cache_mounts(str(tmp_path / "missing"))
