"""The compile step of the pool: candidate builds on the CPUs, before a GPU worker is taken.

The build is content-addressed (harness.compiler), so the evaluator reuses it for free; a
candidate that fails the static check is not compiled at all (the evaluator reports it).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from cuda_agent.errors import CudaAgentError
from cuda_agent.sandbox_pool.harness import BuildResult, EvalJob, build_extension
from cuda_agent.sandbox_pool.harness.static_check import check_candidate

logger = logging.getLogger(__name__)


async def prebuild(job: EvalJob, cache_dir: Path) -> BuildResult | None:
    """Build the job's kernels; None when the evaluator should decide (static check failed, build broke)."""
    report = await asyncio.to_thread(check_candidate, job.files)
    if not report.ok:
        return None
    try:
        return await build_extension(job.files, job.device, cache_dir=cache_dir,
                                     timeout_s=job.options.compile_timeout_s)
    except (CudaAgentError, OSError):
        # The evaluator builds again and turns the same failure into an infra_error result.
        logger.exception("prebuild of %s failed; the evaluator will build it", job.task_id)
        return None
