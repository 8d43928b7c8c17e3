"""The Ray backend: one named dispatcher actor, one evaluation actor per GPU (``num_gpus=1``).

The dispatcher holds the cluster's queue (priorities, back-pressure, deadlines) and hands
each evaluation actor `slots_per_worker` jobs at a time; each evaluation actor runs a
`LocalPool` with one worker on its GPU and its own compile slots, so the next job compiles
on that node's CPUs while the current one is timed. Any process of the Ray cluster (veRL's
reward workers, the agent loop) reaches the pool by name: ``ray://<name>`` in
$CUDA_AGENT_POOL; `RayPoolClient` speaks the same protocol as the unix-socket client.
"""

from __future__ import annotations

import asyncio
import logging
import time
from urllib.parse import parse_qs, urlparse

import ray
from ray.exceptions import RayActorError, RayError

from cuda_agent.errors import ConfigError, PoolError, PoolTimeoutError, PoolUnreachableError, WorkerCrashedError
from cuda_agent.sandbox_pool.harness.models import EvalJob, EvalResult
from cuda_agent.sandbox_pool.pool.base import Pool, PoolStatus
from cuda_agent.sandbox_pool.pool.config import LocalPoolConfig, RayPoolConfig
from cuda_agent.sandbox_pool.pool.local import LocalPool
from cuda_agent.sandbox_pool.pool.protocol import PoolRequest, PoolResponse, handle_request, raise_wire_error
from cuda_agent.sandbox_pool.pool.tickets import JobBook, run_step

logger = logging.getLogger(__name__)

DEFAULT_NAMESPACE = RayPoolConfig.model_fields["namespace"].default


async def _ask(actor: "ray.actor.ActorHandle", request: PoolRequest) -> PoolResponse:
    """Send one protocol request to an actor; its error (if any) is raised as its own class."""
    response = await _ask_raw(actor, request)
    if not response.ok:
        raise_wire_error(response.error)
    return response


async def _ask_raw(actor: "ray.actor.ActorHandle", request: PoolRequest) -> PoolResponse:
    """Send one protocol request to an actor; a withdrawn call is cancelled remotely too."""
    ref = actor.handle.remote(request.model_dump_json())
    try:
        line = await ref
    except asyncio.CancelledError:
        ray.cancel(ref)
        raise
    except RayActorError as exc:
        raise WorkerCrashedError(f"the pool actor died while holding the request: {exc}") from exc
    except RayError as exc:
        raise PoolError(f"the Ray call to the pool failed: {exc}") from exc
    return PoolResponse.model_validate_json(line)


class EvalActor:
    """A Ray actor owning one GPU (or CPU worker): a `LocalPool` with one evaluation worker."""

    def __init__(self, config_json: str) -> None:
        self.pool = LocalPool(LocalPoolConfig.model_validate_json(config_json))

    async def ready(self) -> bool:
        await self.pool.start()
        return True

    async def handle(self, line: str) -> str:
        return (await handle_request(self.pool, line)).model_dump_json()

    async def shutdown(self) -> None:
        await self.pool.close()


class Dispatcher(Pool):
    """The cluster queue inside the named actor: admits jobs and feeds the evaluation actors."""

    def __init__(self, config: RayPoolConfig, actors: list["ray.actor.ActorHandle"]) -> None:
        self.config = config
        self.actors = actors
        self.book = JobBook(config.max_pending_jobs, config.job_timeout_s, config.latency_window)
        self._loops = [asyncio.create_task(self._slot_loop(a)) for a in actors
                       for _ in range(max(config.slots_per_worker, config.depth() + 1))]
        self._started_at = time.monotonic()

    async def evaluate(self, job: EvalJob, *, priority: int = 0, timeout_s: float | None = None) -> EvalResult:
        if job.device != self.config.device:
            raise PoolError(f"job for device {job.device!r} submitted to a {self.config.device!r} pool")
        return await self.book.wait(self.book.admit(job, priority, timeout_s))

    async def _slot_loop(self, actor: "ray.actor.ActorHandle") -> None:
        while True:
            ticket = await self.book.queue.get()
            ticket.stage = "running"
            request = PoolRequest(op="submit", job=ticket.job, priority=ticket.priority,
                                  timeout_s=max(ticket.remaining_s(), 1e-3))
            task = await run_step(ticket, _ask(actor, request))
            if task.cancelled():
                continue
            if task.exception() is not None:
                ticket.deliver(exc=task.exception())
            else:
                ticket.deliver(task.result().result)

    async def status(self) -> PoolStatus:
        inner = await asyncio.gather(*(_ask(a, PoolRequest(op="status")) for a in self.actors), return_exceptions=True)
        workers, queued, compiling, running = [], 0, 0, 0
        for i, answer in enumerate(inner):
            if isinstance(answer, BaseException) or answer.status is None:
                logger.warning("status of pool actor %d failed: %s", i, answer)
                continue
            for w in answer.status.workers:
                workers.append(w.model_copy(update={"name": f"{self.config.name}-w{i}/{w.name}"}))
            queued += answer.status.queue_depth
            compiling += answer.status.compiling
            running += answer.status.running
        stages = self.book.stages()
        busy = sum(w.busy_fraction for w in workers) / len(workers) if workers else 0.0
        return PoolStatus(
            backend="ray", device=self.config.device, address=ray_address(self.config.name, self.config.namespace),
            uptime_s=time.monotonic() - self._started_at, queue_depth=stages["queue_depth"] + queued,
            compiling=compiling, running=running, pending=stages["pending"], max_pending=self.config.max_pending_jobs,
            busy_fraction=busy, latency=self.book.latency.stats(), workers=workers, **self.book.counts)

    async def close(self) -> None:
        for loop in self._loops:
            loop.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        self.book.close()


class DispatcherActor:
    """The named Ray actor (`RayPoolConfig.name`) in front of the evaluation actors."""

    def __init__(self, config_json: str) -> None:
        self.config = RayPoolConfig.model_validate_json(config_json)
        self.actors: list[ray.actor.ActorHandle] = []
        self.dispatcher: Dispatcher | None = None
        self._lock = asyncio.Lock()

    async def ready(self) -> bool:
        """Create the evaluation actors and wait until each one's evaluator is up."""
        async with self._lock:
            if self.dispatcher is None:
                self.actors = [self._make_actor(i) for i in range(self.config.num_workers)]
                await asyncio.gather(*(a.ready.remote() for a in self.actors))
                self.dispatcher = Dispatcher(self.config, self.actors)
        return True

    def _make_actor(self, index: int) -> "ray.actor.ActorHandle":
        cfg = self.config
        local = LocalPoolConfig(device=cfg.device, devices=[0] if cfg.device == "cuda" else None,
                                compile_workers=cfg.compile_workers, max_pending_jobs=cfg.slots_per_worker * 4,
                                job_timeout_s=cfg.job_timeout_s, recycle_after_jobs=cfg.recycle_after_jobs,
                                cache_dir=cfg.cache_dir, isolate=cfg.isolate, latency_window=cfg.latency_window,
                                pipeline_depth=cfg.pipeline_depth, window_check=cfg.window_check)
        options = dict(num_gpus=cfg.num_gpus_per_worker, resources=cfg.worker_resources or None,
                       name=f"{cfg.name}-w{index}", namespace=cfg.namespace, max_restarts=-1, max_task_retries=0,
                       get_if_exists=True)
        if cfg.detached:
            options["lifetime"] = "detached"
        return ray.remote(EvalActor).options(**options).remote(local.model_dump_json())

    async def handle(self, line: str) -> str:
        await self.ready()
        assert self.dispatcher is not None
        return (await handle_request(self.dispatcher, line)).model_dump_json()

    async def shutdown(self) -> None:
        if self.dispatcher is not None:
            await self.dispatcher.close()
        await asyncio.gather(*(a.shutdown.remote() for a in self.actors), return_exceptions=True)
        for actor in self.actors:
            ray.kill(actor)


def ray_address(name: str, namespace: str = DEFAULT_NAMESPACE) -> str:
    """The address of a Ray pool: ray://<name>, with ?namespace= when not the default."""
    return f"ray://{name}" if namespace == DEFAULT_NAMESPACE else f"ray://{name}?namespace={namespace}"


def init_ray(address: str | None) -> None:
    """Join the Ray cluster at `address` (None: $RAY_ADDRESS, a running local cluster, else a new one)."""
    if not ray.is_initialized():
        ray.init(address=address, ignore_reinit_error=True, logging_level=logging.WARNING)


class RayPoolClient(Pool):
    """Reaches a running Ray pool by the name of its dispatcher actor."""

    def __init__(self, name: str, namespace: str = DEFAULT_NAMESPACE, *, ray_init_address: str | None = None,
                 status_timeout_s: float = 60.0, default_timeout_s: float = 7200.0, timeout_margin_s: float = 60.0):
        self.name = name
        self.namespace = namespace
        self.ray_init_address = ray_init_address
        self.status_timeout_s = status_timeout_s
        self.default_timeout_s = default_timeout_s
        self.timeout_margin_s = timeout_margin_s
        self._actor: ray.actor.ActorHandle | None = None

    @classmethod
    def from_address(cls, address: str) -> "RayPoolClient":
        """Parse ``ray://<name>[?namespace=<ns>]``."""
        parsed = urlparse(address)
        if parsed.scheme != "ray" or not parsed.netloc:
            raise ConfigError(f"not a Ray pool address: {address!r} (expected ray://<actor-name>)")
        namespace = parse_qs(parsed.query).get("namespace", [DEFAULT_NAMESPACE])[0]
        return cls(parsed.netloc, namespace)

    @property
    def ray_address(self) -> str:
        return ray_address(self.name, self.namespace)

    async def start(self) -> None:
        if self._actor is None:
            try:  # a client joins a running cluster ("auto"); it never starts one of its own
                await asyncio.to_thread(init_ray, self.ray_init_address or "auto")
            except ConnectionError as exc:
                raise PoolUnreachableError(f"no Ray cluster to find pool {self.name!r} in: {exc}") from exc
            try:
                self._actor = await asyncio.to_thread(ray.get_actor, self.name, namespace=self.namespace)
            except ValueError as exc:
                raise PoolUnreachableError(
                    f"no Ray pool named {self.name!r} in namespace {self.namespace!r}; start one with "
                    "`cuda-agent pool serve --backend ray`") from exc

    async def evaluate(self, job: EvalJob, *, priority: int = 0, timeout_s: float | None = None) -> EvalResult:
        request = PoolRequest(op="submit", job=job, priority=priority, timeout_s=timeout_s)
        wait = (timeout_s if timeout_s is not None else self.default_timeout_s) + self.timeout_margin_s
        response = await self._call(request, wait)
        assert response.result is not None
        return response.result

    async def status(self) -> PoolStatus:
        response = await self._call(PoolRequest(op="status"), self.status_timeout_s)
        assert response.status is not None
        return response.status

    async def _call(self, request: PoolRequest, wait_s: float) -> PoolResponse:
        await self.start()
        assert self._actor is not None
        try:
            async with asyncio.timeout(wait_s):
                response = await _ask_raw(self._actor, request)
        except TimeoutError:
            raise PoolTimeoutError(f"the Ray pool {self.name!r} did not answer within {wait_s:.0f} s") from None
        if not response.ok:
            raise_wire_error(response.error)
        return response


class RayPool(RayPoolClient):
    """Creates (or joins) the named pool of `config` on the Ray cluster; closes it unless detached."""

    def __init__(self, config: RayPoolConfig | None = None) -> None:
        self.config = config or RayPoolConfig()
        super().__init__(self.config.name, self.config.namespace, ray_init_address=self.config.ray_address)
        self.address: str | None = None

    async def start(self) -> None:
        if self._actor is not None:
            return
        await asyncio.to_thread(init_ray, self.config.ray_address)
        options = dict(name=self.name, namespace=self.namespace, get_if_exists=True, num_cpus=0,
                       max_restarts=0, max_concurrency=10_000)
        if self.config.detached:
            options["lifetime"] = "detached"
        actor = ray.remote(DispatcherActor).options(**options).remote(self.config.model_dump_json())
        await actor.ready.remote()
        self._actor = actor
        logger.info("Ray pool %s ready with %d worker(s)", self.ray_address, self.config.num_workers)

    async def close(self) -> None:
        if self._actor is None or self.config.detached:
            return
        actor, self._actor = self._actor, None
        try:
            await actor.shutdown.remote()
        except RayError:
            logger.warning("the Ray pool %s did not shut down cleanly", self.name, exc_info=True)
        ray.kill(actor)
