"""The toolchain record: served without importing torch, keyed on every fact that changes it."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from cuda_agent.sandbox_pool.harness.compiler import toolchain
from cuda_agent.sandbox_pool.harness.compiler.toolchain import Toolchain, detect_toolchain, nvml_cuda_arch, record_key

PROBE = """
import json, sys
from pathlib import Path
from cuda_agent.sandbox_pool.harness.compiler.toolchain import detect_toolchain
tc = detect_toolchain('cpu', Path(sys.argv[1]))
print(json.dumps({'torch': 'torch' in sys.modules, 'toolchain': tc.model_dump()}))
"""


@pytest.fixture(autouse=True)
def _fresh_detection(monkeypatch: pytest.MonkeyPatch):
    for name in ("CXX", "CUDA_AGENT_CUDA_ARCH", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    detect_toolchain.cache_clear()
    yield
    detect_toolchain.cache_clear()


def _records(cache: Path) -> list[Path]:
    return sorted((cache / "toolchain").glob("*.json"))


def test_a_stored_record_is_served_in_a_fresh_process_without_torch(tmp_path: Path) -> None:
    def detect() -> dict:
        out = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True, text=True,
                             timeout=300, check=True)
        return json.loads(out.stdout)

    first, second = detect(), detect()
    assert first["torch"] is True and second["torch"] is False
    assert second["toolchain"] == first["toolchain"]
    assert len(_records(tmp_path)) == 1
    assert Toolchain.model_validate_json(_records(tmp_path)[0].read_text()) == Toolchain.model_validate(first["toolchain"])


def test_without_a_cache_dir_nothing_is_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert detect_toolchain("cpu").device == "cpu"
    assert not list(tmp_path.iterdir())


def test_a_changed_compiler_is_a_miss(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    base = detect_toolchain("cpu", cache)
    copy = tmp_path / "g++"
    shutil.copy2(shutil.which("g++") or "", copy)
    monkeypatch.setenv("CXX", str(copy))
    detect_toolchain.cache_clear()
    assert detect_toolchain("cpu", cache).cxx == str(copy) and len(_records(cache)) == 2
    key = record_key("cpu")
    stat = copy.stat()
    os.utime(copy, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # the same path, replaced
    assert record_key("cpu") != key
    detect_toolchain.cache_clear()
    detect_toolchain("cpu", cache)
    assert len(_records(cache)) == 3
    monkeypatch.delenv("CXX")
    detect_toolchain.cache_clear()
    assert detect_toolchain("cpu", cache) == base and len(_records(cache)) == 3  # served again


def test_the_gpu_arch_is_part_of_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(toolchain, "nvml_cuda_arch", lambda: None)
    assert record_key("cuda") is None  # no torch-free arch: no record, detected with torch
    monkeypatch.setenv("CUDA_AGENT_CUDA_ARCH", "80")
    keyed_80 = record_key("cuda")
    monkeypatch.setenv("CUDA_AGENT_CUDA_ARCH", "90a")
    keyed_90 = record_key("cuda")
    assert keyed_80 and keyed_90 and keyed_80[1] == "80" and keyed_90[1] == "90a" and keyed_80[0] != keyed_90[0]
    assert record_key("cpu") != record_key("cuda")
    if toolchain._cuda_home() is None:
        pytest.skip("no CUDA toolkit here")
    assert detect_toolchain("cuda", tmp_path).cuda_arch == "90a"
    monkeypatch.setenv("CUDA_AGENT_CUDA_ARCH", "80")
    detect_toolchain.cache_clear()  # the process's own cache: one answer per process, as before
    assert detect_toolchain("cuda", tmp_path).cuda_arch == "80"
    assert len(_records(tmp_path)) == 2


def test_a_torch_arch_other_than_nvmls_is_not_stored(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if toolchain._cuda_home() is None:
        pytest.skip("no CUDA toolkit here")
    monkeypatch.setattr(toolchain, "nvml_cuda_arch", lambda: "80")
    monkeypatch.setattr(toolchain, "_cuda_arch", lambda: "90a")
    assert detect_toolchain("cuda", tmp_path).cuda_arch == "90a"
    assert not _records(tmp_path)


def test_a_corrupt_record_is_detected_again_and_rewritten(tmp_path: Path) -> None:
    good = detect_toolchain("cpu", tmp_path)
    (record,) = _records(tmp_path)
    for corrupt in ("{not json", json.dumps({**good.model_dump(), "device": 3})):
        record.write_text(corrupt)
        detect_toolchain.cache_clear()
        assert detect_toolchain("cpu", tmp_path) == good
        assert Toolchain.model_validate_json(record.read_text()) == good
    assert [p.name for p in (tmp_path / "toolchain").iterdir()] == [record.name]  # no temporary file left


def test_nvml_arch_is_none_without_a_visible_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    if not Path("/dev/nvidiactl").exists():
        assert nvml_cuda_arch() is None  # no libnvidia-ml / no GPU on this machine
    for hidden in ("", "-1", "-0"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", hidden)
        assert nvml_cuda_arch() is None


class _FakeNvml:
    """libnvidia-ml's calls used by nvml_cuda_arch, answering for the GPUs in `caps`."""

    def __init__(self, caps: list[tuple[int, int]], init_rc: int = 0) -> None:
        self.caps, self.init_rc, self.shut = caps, init_rc, False

    def nvmlInit_v2(self) -> int:
        return self.init_rc

    def nvmlShutdown(self) -> int:
        self.shut = True
        return 0

    def nvmlDeviceGetCount_v2(self, count) -> int:  # noqa: ANN001
        count._obj.value = len(self.caps)
        return 0

    def nvmlDeviceGetHandleByIndex_v2(self, index: int, handle) -> int:  # noqa: ANN001
        handle._obj.value = index + 1
        return 0

    def nvmlDeviceGetCudaComputeCapability(self, handle, major, minor) -> int:  # noqa: ANN001
        major._obj.value, minor._obj.value = self.caps[handle.value - 1]
        return 0


@pytest.mark.parametrize(("caps", "arch"), [([(9, 0)], "90a"), ([(10, 0), (10, 0)], "100a"), ([(8, 6)], "86"),
                                            ([(9, 0), (8, 0)], None), ([], None)])
def test_nvml_arch_names_one_shared_capability(monkeypatch: pytest.MonkeyPatch, caps: list, arch: str | None) -> None:
    fake = _FakeNvml(caps)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: fake)
    assert nvml_cuda_arch() == arch and fake.shut


def test_nvml_failures_are_none(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _FakeNvml([(9, 0)], init_rc=9)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: fake)
    assert nvml_cuda_arch() is None
    monkeypatch.setattr(ctypes, "CDLL", lambda name: object())  # a library without the calls
    assert nvml_cuda_arch() is None
