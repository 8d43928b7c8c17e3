"""``VERL_PLATFORM=cpu``: veRL's platform interface for a machine without accelerators (gloo, torch.cpu).

veRL 0.9.1 registers platforms for NVIDIA, ROCm and Ascend only and falls back to NVIDIA, so on a
CPU machine ``get_device_name()`` is ``"cuda"`` and the trainer's workers die initialising NCCL.
This platform, registered through veRL's own ``PlatformRegistry`` by the cuda_agent plugin and
chosen with ``VERL_PLATFORM=cpu``, answers ``"cpu"`` and ``gloo`` instead. Ray's ``GPU`` resource
stays the unit of placement (start Ray with ``ray_init.num_gpus=N`` logical slots): veRL's resource
pools are counted in it.

docs/training.md ("A PPO step on CPU") says how far ``main_ppo`` gets with it.
"""

from __future__ import annotations

import os
import types
from contextlib import contextmanager
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry


def _join_process_group(_index: int | str | None = None) -> None:
    """Select "the device" of a veRL worker on a host: join its process group, with gloo alone.

    veRL's ``initialize_global_process_group_ray`` would ask for ``cpu:gloo,<device>:<backend>``, which
    on this platform is ``cpu:gloo,cpu:gloo`` and torch refuses (duplicate device type). veRL's
    ``Worker.__init__`` selects the device (``set_device``, when ``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES``
    is set) before it initialises the group, and skips the group once one exists: joining here, from
    the same ``RANK`` / ``WORLD_SIZE`` / ``MASTER_ADDR`` veRL would use, is the whole difference.
    """
    import torch.distributed as dist

    if dist.is_initialized() or "RANK" not in os.environ or "MASTER_ADDR" not in os.environ:
        return
    dist.init_process_group(backend="gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]),
                            init_method=os.environ.get("DIST_INIT_METHOD"))


def _device_module() -> types.ModuleType:
    """``torch.cpu`` plus the memory and RNG calls veRL makes on ``get_torch_device()`` (no-ops or host figures)."""
    module = types.ModuleType("cuda_agent_cpu_device")
    for name in dir(torch.cpu):
        if not name.startswith("__"):
            setattr(module, name, getattr(torch.cpu, name))
    page = os.sysconf("SC_PAGE_SIZE")
    module.empty_cache = lambda: None
    module.ipc_collect = lambda: None
    module.set_per_process_memory_fraction = lambda *_, **__: None
    module.reset_peak_memory_stats = lambda *_, **__: None
    module.mem_get_info = lambda *_: (os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page)
    for name in ("memory_allocated", "memory_reserved", "max_memory_allocated", "max_memory_reserved"):
        setattr(module, name, lambda *_: 0)
    module.set_device = _join_process_group
    module.get_device_name = lambda *_: "cpu"
    module.get_rng_state = lambda *_: torch.get_rng_state()
    module.set_rng_state = lambda state, *_: torch.set_rng_state(state)
    module.manual_seed = torch.manual_seed
    module.manual_seed_all = torch.manual_seed
    return module


@PlatformRegistry.register(platform="cpu")
class PlatformCPU(PlatformBase):
    """Host CPUs, one process group of gloo."""

    _module = _device_module()

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> types.ModuleType:
        return self._module

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        return False  # never auto-detected: chosen with VERL_PLATFORM=cpu

    def current_device(self) -> str:  # type: ignore[override]
        # veRL uses this "index" as a device handle (model.to(device=...), torch.device(...)): on a
        # host the handle is "cpu", where an int would name an accelerator that is not there
        return "cpu"

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        _join_process_group(device_index)

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def register_cpu_engines() -> None:
    """veRL's FSDP engines are registered for ``cuda`` and ``npu``; the same classes serve ``cpu``
    (FSDP2 over gloo). Registered through veRL's public ``EngineRegistry``."""
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead, FSDPEngineWithValueHead

    for model_type, engine in (("language_model", FSDPEngineWithLMHead), ("value_model", FSDPEngineWithValueHead)):
        if "cpu" not in EngineRegistry._engines.get(model_type, {}).get("fsdp", {}):
            EngineRegistry.register(model_type=model_type, backend=["fsdp", "fsdp2"], device="cpu")(engine)
