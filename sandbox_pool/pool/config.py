"""Configuration of the evaluation pool: one model per backend, picked by `type`.

``PoolConfig`` is the discriminated union; ``config.build()`` imports the backend only
when it is used (Ray is never imported for a local pool).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cuda_agent.errors import ConfigError

if TYPE_CHECKING:
    from cuda_agent.sandbox_pool.pool.local import LocalPool
    from cuda_agent.sandbox_pool.pool.ray_pool import RayPool

ENV_ADDRESS = "CUDA_AGENT_POOL"
"""Environment variable holding the address of the cluster's pool (docs/pool.md)."""


class _CommonPoolConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device: Literal["cpu", "cuda"] = Field("cpu", description="Device every evaluation worker runs on.")
    compile_workers: int = Field(2, ge=1, le=256, description="Concurrent candidate builds (CPU work), per node.")
    max_pending_jobs: int = Field(
        256, ge=1, description="Jobs admitted and not finished (queued, compiling or evaluating); "
        "beyond it a submission fails at once with PoolOverloadedError.")
    job_timeout_s: float = Field(
        1800.0, gt=0, description="Default limit of one job from submission to result (queueing included); "
        "exceeding it raises PoolTimeoutError, an infrastructure-side failure.")
    recycle_after_jobs: int = Field(
        200, ge=1, description="A worker's Evaluator is closed and replaced after this many jobs "
        "(and after any infrastructure error, timeout or crash of the harness).")
    cache_dir: Path | None = Field(None, description="Compile and baseline cache; default $CUDA_AGENT_CACHE.")
    isolate: bool = Field(True, description="Run candidates in a user+network namespace (EvaluatorConfig).")
    latency_window: int = Field(2048, ge=16, description="Most recent jobs used for the latency percentiles.")
    pipeline_depth: int | None = Field(
        None, ge=1, le=32, description="Evaluations in flight per device: all but their clock calibration and "
        "timed calls share the device (harness/gate.py). None = 4 on cuda, 1 on cpu (a CPU's timings are "
        "disturbed by any other work on its cores).")

    window_check: bool = Field(
        False, description="Every timed evaluation also times the eager reference in its own window and refuses "
        "a reward timed under a load its cached baselines were not ('machine loaded', infra_error; "
        "harness/window_check.py). Costs ~0.3 s (CPU) to ~0.8 s (cuda) per correct evaluation.")

    def depth(self) -> int:
        """`pipeline_depth`, resolved."""
        if self.pipeline_depth is not None:
            return self.pipeline_depth
        return 4 if self.device == "cuda" else 1


class LocalPoolConfig(_CommonPoolConfig):
    """The embedded pool: evaluation workers in this process's event loop, one per device."""

    type: Literal["local"] = Field("local", description="Backend selector.")
    devices: list[int] | None = Field(
        None, description="GPU indices to own, one worker each (cuda); None = every visible GPU. "
        "Ignored on cpu, where `cpu_workers` workers run.")
    cpu_workers: int = Field(1, ge=1, le=64, description="Evaluation workers on the cpu device.")
    worker_processes: bool | None = Field(
        None, description="Run each evaluation worker in a process of its own, so workers do not share "
        "one interpreter lock and event loop; None = yes when there are several GPU workers.")

    def worker_devices(self) -> list[int]:
        """Device index of each evaluation worker (GPU index, or the worker number on cpu)."""
        if self.device == "cpu":
            return list(range(self.cpu_workers))
        if self.devices is not None:
            return list(self.devices)
        import torch  # the cuda path only; callers of a cpu pool do not pay for it

        count = torch.cuda.device_count()
        if count == 0:
            raise ConfigError("device='cuda' but no GPU is visible; use device='cpu' or fix CUDA_VISIBLE_DEVICES")
        return list(range(count))

    def uses_worker_processes(self) -> bool:
        """Whether each worker runs in its own process (`worker_processes`, resolved)."""
        if self.worker_processes is not None:
            return self.worker_processes
        return self.device == "cuda" and len(self.worker_devices()) > 1

    @model_validator(mode="after")
    def _check_devices(self) -> "LocalPoolConfig":
        if self.devices is not None and (not self.devices or len(set(self.devices)) != len(self.devices)):
            raise ValueError("devices must be a non-empty list of distinct GPU indices")
        return self

    def build(self) -> "LocalPool":
        from cuda_agent.sandbox_pool.pool.local import LocalPool

        return LocalPool(self)


class RayPoolConfig(_CommonPoolConfig):
    """A pool of Ray actors, one per GPU, behind one named dispatcher actor."""

    type: Literal["ray"] = Field("ray", description="Backend selector.")
    name: str = Field("cuda_agent_pool", description="Name of the dispatcher actor (address ray://<name>).")
    namespace: str = Field("cuda_agent", description="Ray namespace of the named actors.")
    ray_address: str | None = Field(None, description="Passed to ray.init(address=...) when Ray is not initialised.")
    num_workers: int = Field(1, ge=1, description="Evaluation actors, one per GPU.")
    num_gpus_per_worker: float = Field(1.0, ge=0, description="GPUs each actor reserves (1 on GPU clusters).")
    worker_resources: dict[str, float] = Field(default_factory=dict, description="Extra custom resources per actor.")
    slots_per_worker: int = Field(2, ge=1, le=16, description="Jobs handed to an actor at once, so its next "
                                  "compile overlaps the current evaluation.")
    detached: bool = Field(False, description="Actors outlive the driver that created them.")

    def build(self) -> "RayPool":
        from cuda_agent.sandbox_pool.pool.ray_pool import RayPool

        return RayPool(self)


PoolConfig = Annotated[Union[LocalPoolConfig, RayPoolConfig], Field(discriminator="type")]
"""Any pool configuration; validate a dict with ``pydantic.TypeAdapter(PoolConfig)``."""
