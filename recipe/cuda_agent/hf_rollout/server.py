"""``HFServer``: the rollout server veRL's agent loops call, as an async Ray actor.

It keeps the contract of veRL 0.9.1's ``vLLMHttpServer`` that the trainer and ``LLMServerClient``
use: ``generate`` (token ids in; token ids, their log-probs and a ``TokenOutput`` out, with
``global_steps`` in ``extra_fields``), ``sleep`` / ``wake_up``, ``abort_all_requests`` /
``resume_generation``, ``wait_for_requests_to_drain``, ``set_global_steps`` and the KV-cache and
profiler calls the replica fans out (no-ops here: each batch's cache lives only as long as the
batch). No HTTP server: both of our loops are token-in / token-out.

Concurrent requests are batched: a request waits up to ``batch_window_s`` for others with the
same sampling rule, then up to ``rollout.max_num_seqs`` of them decode together in a worker
thread. Requests arriving meanwhile form the next batch (no continuous batching).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from verl.workers.rollout.replica import TokenOutput

from cuda_agent.recipe.hf_rollout.engine import build_engine
from cuda_agent.recipe.hf_rollout.sampling import SamplingRequest, resolve

logger = logging.getLogger(__name__)

BATCH_WINDOW_S = 0.005
"""How long the first request of a batch waits for company (the agent loop fires its requests
within microseconds of each other; decoding one token of a 135M model takes milliseconds)."""


@dataclass
class _Pending:
    request_id: str
    prompt_ids: list[int]
    request: SamplingRequest
    done: asyncio.Future = field(repr=False)


class HFServer:
    """One transformers engine serving one rollout replica (tensor parallel size 1)."""

    def __init__(
        self,
        config: Any,
        model_config: Any,
        replica_rank: int = 0,
        cuda_visible_devices: str | None = None,
        device: str | None = None,
    ):
        from verl.utils.config import omega_conf_to_dataclass
        from verl.workers.config import HFModelConfig

        if cuda_visible_devices:  # the actor is started with Ray's own setting of it turned off
            os.environ["CUDA_VISIBLE_DEVICES"] = cuda_visible_devices
        self.config = omega_conf_to_dataclass(config)
        self.model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.replica_rank = replica_rank
        if self.config.tensor_model_parallel_size != 1:
            raise ValueError(
                f"rollout.name=hf serves with tensor_model_parallel_size=1 only "
                f"(got {self.config.tensor_model_parallel_size}); every GPU is its own replica"
            )
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.engine = build_engine(
            self.model_config, dtype=self.config.dtype, load_format=self.config.load_format,
            device=device, seed=self.config.seed + replica_rank,
        )
        self.max_model_len = self.config.max_model_len or self.model_config.hf_config.max_position_embeddings
        self.global_steps: int | None = None
        self.batch_window_s = BATCH_WINDOW_S
        self._queue: list[_Pending] = []
        self._loop_task: asyncio.Task | None = None
        self._work: asyncio.Event | None = None  # created on the actor's event loop
        self._idle: asyncio.Event | None = None
        self._gate: asyncio.Event | None = None  # set while requests are admitted
        self._rejecting = False
        self._aborting = False
        self._lock: asyncio.Lock | None = None  # generation and weight loading never overlap
        self.batches: list[int] = []  # batch sizes served, for tests and the benchmark
        logger.info("HFServer replica %d on %s, %s, max_model_len %d", replica_rank, device,
                    self.engine.dtype, self.max_model_len)

    def _ensure_loop(self) -> None:
        """The batching task and its events live on the running event loop (a Ray actor has one;
        a test may call from several in turn)."""
        if self._loop_task is None or self._loop_task.get_loop() is not asyncio.get_running_loop():
            self._work, self._idle, self._gate = asyncio.Event(), asyncio.Event(), asyncio.Event()
            self._idle.set()
            self._gate.set()
            self._lock = asyncio.Lock()
            self._loop_task = asyncio.get_running_loop().create_task(self._serve())

    # --------------------------------------------------------------------------------- generate

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Any = None,
        video_data: Any = None,
        audio_data: Any = None,
        mm_processor_kwargs: dict[str, Any] | None = None,
        priority: int = 0,
        **_: Any,
    ) -> TokenOutput:
        if image_data is not None or video_data is not None or audio_data is not None:
            raise ValueError("the hf rollout server serves text models only (got image, video or audio data)")
        self._ensure_loop()
        prompt_ids = [int(t) for t in prompt_ids]
        request = resolve(
            sampling_params, prompt_len=len(prompt_ids), max_model_len=self.max_model_len,
            prompt_length=self.config.prompt_length, response_length=self.config.response_length,
            ignore_eos_default=self.config.ignore_eos,
        )
        while not self._gate.is_set():  # parked behind abort_all_requests until resume_generation
            if self._rejecting:
                return self._aborted([], None)
            await self._gate.wait()
        pending = _Pending(request_id, prompt_ids, request, asyncio.get_running_loop().create_future())
        self._queue.append(pending)
        self._idle.clear()
        self._work.set()
        return await pending.done

    def _aborted(self, token_ids: list[int], log_probs: list[float] | None) -> TokenOutput:
        return TokenOutput(token_ids=token_ids, log_probs=log_probs, stop_reason="aborted", num_preempted=0,
                           extra_fields={"global_steps": self.global_steps})

    async def _serve(self) -> None:
        while True:
            await self._work.wait()
            await asyncio.sleep(self.batch_window_s)
            batch = self._take_batch()
            if not batch:
                self._work.clear()
                if not self._queue:
                    self._idle.set()
                continue
            try:
                async with self._lock:
                    completions = await asyncio.to_thread(
                        self.engine.generate, [p.prompt_ids for p in batch], [p.request for p in batch],
                        lambda: self._aborting,
                    )
            except Exception as error:  # every waiting request learns why, the server lives on
                for pending in batch:
                    if not pending.done.done():
                        pending.done.set_exception(error)
                continue
            self.batches.append(len(batch))
            for pending, completion in zip(batch, completions, strict=True):
                if pending.done.done():
                    continue
                if completion.aborted:
                    pending.done.set_result(self._aborted(completion.token_ids, completion.log_probs))
                else:
                    pending.done.set_result(TokenOutput(
                        token_ids=completion.token_ids, log_probs=completion.log_probs, stop_reason="completed",
                        num_preempted=0, extra_fields={"global_steps": self.global_steps},
                    ))

    def _take_batch(self) -> list[_Pending]:
        """The oldest request and up to max_num_seqs - 1 more with its sampling rule."""
        if not self._queue:
            return []
        key = self._queue[0].request.batch_key()
        limit = max(1, int(self.config.max_num_seqs))
        batch = [p for p in self._queue if p.request.batch_key() == key][:limit]
        taken = {id(p) for p in batch}
        self._queue = [p for p in self._queue if id(p) not in taken]
        return batch

    # ---------------------------------------------------------------------------- abort / drain

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False) -> dict:
        """Close the gate, cut the running batch short and answer every queued request ``aborted``.
        Requests arriving afterwards wait for ``resume_generation`` (or are refused, ``reject_request``)."""
        self._ensure_loop()
        self._gate.clear()
        self._rejecting = reject_request
        queued, self._queue = self._queue, []
        for pending in queued:
            if not pending.done.done():
                pending.done.set_result(self._aborted([], None))
        self._aborting = True
        try:
            async with self._lock:  # the running batch (if any) has stopped and answered
                pass
        finally:
            self._aborting = False
        ids = [p.request_id for p in queued]
        logger.info("HFServer: aborted %d queued requests (and the running batch, if any)", len(ids))
        return {"aborted_count": len(ids), "request_ids": ids}

    async def resume_generation(self) -> None:
        self._ensure_loop()
        self._rejecting = False
        self._gate.set()

    async def wait_for_requests_to_drain(self) -> None:
        self._ensure_loop()
        await self._idle.wait()
        async with self._lock:
            pass

    # ------------------------------------------------------------------------------- sleep / wake

    async def sleep(self) -> None:
        if not self.config.free_cache_engine:
            return
        await self.wait_for_requests_to_drain()
        async with self._lock:
            self.engine.offload()

    async def wake_up(self, tags: list[str] | None = None) -> None:
        if tags is None or "weights" in tags:
            self.engine.onload()

    async def clear_kv_cache(self) -> None:
        """No persistent KV cache: each batch builds its own."""

    async def release_kv_cache(self) -> None:
        """No persistent KV cache: each batch builds its own."""

    async def resume_kv_cache(self) -> None:
        """No persistent KV cache: each batch builds its own."""

    async def start_profile(self, **_: Any) -> None:
        """Profiling is the vLLM server's; nothing to start here."""

    async def stop_profile(self) -> None:
        """Profiling is the vLLM server's; nothing to stop here."""

    async def set_global_steps(self, global_steps: int) -> None:
        self.global_steps = global_steps

    # -------------------------------------------------------------------------------- weight sync

    async def begin_weight_sync(self) -> None:
        """Start a sync once the running batch is over; batches started before it ends fail loudly."""
        self._ensure_loop()
        async with self._lock:
            self.engine.begin_weight_sync()
        self._sync_started = time.perf_counter()
        self._sync_bytes = 0

    async def load_weights(self, named_tensors: list[tuple[str, torch.Tensor]]) -> None:
        async with self._lock:
            self._sync_bytes += self.engine.load_weights(named_tensors)

    async def finish_weight_sync(self, global_steps: int | None = None) -> dict[str, Any]:
        """End the sync (every parameter written once, or it raises) and tag later outputs with its step."""
        async with self._lock:
            count = self.engine.finish_weight_sync()
        if global_steps is not None:
            self.global_steps = global_steps
        return {"parameters": count, "bytes": self._sync_bytes, "seconds": time.perf_counter() - self._sync_started,
                "global_steps": self.global_steps}

    async def digests(self, names: list[str]) -> dict[str, str]:
        """Hashes of named parameters as served (``engine.tensor_digest``): proof that a sync landed."""
        return self.engine.digests(names)

    async def parameter_names(self) -> list[str]:
        return self.engine.parameter_names

    async def batch_sizes(self) -> list[int]:
        return list(self.batches)
