"""The one-shot path's candidate child, started before the CLI's own torch import has ended.

On the one-shot path (`oneshot.py`) the evaluator exists only once this process has imported
torch (3-4.5 s on an H200 host); by then the forkserver, started first (`zygote_launch`), is
often ready and a cached or short build done. The candidate's child is then started at once:
fork, hardening and its CUDA context (~0.4 s) overlap the import instead of following it, and
on cuda, while it waits for its draws, it uses each input distribution's kernels once on
throwaway seeds (their first use, ~0.25 s; `ChildSpec.warm_draws`). Nothing else uses the device
on this path, which is why only it warms up (a pool's children share the device under the gate).

The evaluator adopts the child at verification through the reference prepared ahead, whose work
folder it shares (`ReferenceAhead.take_child`); it is killed whenever it is not adopted: a failed
compile, a rejected object, baselines to measure (they hold the device alone), an error.
Standard library and pydantic only: no torch here.
"""

from __future__ import annotations

import os
import secrets
import shutil
from dataclasses import dataclass, field

from cuda_agent.sandbox_pool.harness.models import EvalJob
from cuda_agent.sandbox_pool.harness.protocol import ChildSpec, region_memfd
from cuda_agent.sandbox_pool.harness.runner import ChildProcess, Zygote

EXTENSION_NAME = "cuda_extension.so"
"""The candidate's private copy of its build in its work folder (the cache stays out of its reach)."""


def candidate_spec(job: EvalJob, *, work: str, so_path: str, device_index: int, isolate: bool,
                   cpu_memory_limit_mb: int, warm_draws: bool = False) -> ChildSpec:
    """The start argument of a candidate's child (its draws and sizes follow in `go`)."""
    return ChildSpec(
        role="candidate", device=job.device, device_index=device_index, work_dir=work, so_path=so_path,
        model_new_src=job.files["model_new.py"], problem_src=job.problem_src, warmup=job.options.warmup_calls,
        init_seed=secrets.randbits(62), isolate=isolate,  # unrelated to any input seed
        memory_limit_mb=cpu_memory_limit_mb if job.device == "cpu" else None, gated=True, warm_draws=warm_draws,
    )


def warms_draws(device: str) -> bool:
    """On a GPU a kernel's first use costs 10-60 ms; on a CPU little, and the cores are the import's."""
    return device == "cuda"


def private_copy(build_so: str, work: str) -> str:
    """Copy the built module into the child's work folder; returns the copy's path."""
    so_path = os.path.join(work, EXTENSION_NAME)
    shutil.copyfile(build_so, so_path)
    return so_path


@dataclass
class EarlyChild:
    """A started candidate child and its trial-output region's fd, until the evaluator adopts them."""

    child: ChildProcess
    region_fd: int | None
    taken: bool = field(default=False)

    @classmethod
    def start(cls, zygote: Zygote, job: EvalJob, build_so: str, work: str, *, device_index: int, isolate: bool,
              cpu_memory_limit_mb: int) -> "EarlyChild":
        """Fork the child now (blocks until the forkserver is ready and answers: call it in a thread)."""
        spec = candidate_spec(job, work=work, so_path=private_copy(build_so, work), device_index=device_index,
                              isolate=isolate, cpu_memory_limit_mb=cpu_memory_limit_mb,
                              warm_draws=warms_draws(job.device))
        fd = region_memfd()
        try:
            return cls(ChildProcess(zygote, spec, fd), fd)
        except BaseException:
            if fd is not None:
                os.close(fd)
            raise

    def take(self) -> tuple[ChildProcess, int | None]:
        """The child and its region's fd: the caller owns them from now on."""
        self.taken = True
        return self.child, self.region_fd

    def discard(self) -> None:
        """Kill the child unless it was taken (idempotent)."""
        if self.taken:
            return
        self.taken = True
        self.child.kill()
        if self.region_fd is not None:
            os.close(self.region_fd)


__all__ = ["EarlyChild", "candidate_spec", "private_copy", "warms_draws"]
