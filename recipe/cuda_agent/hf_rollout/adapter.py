"""``HFServerAdapter``: the rollout object inside veRL's hybrid actor worker for ``rollout.name=hf``.

``ActorRolloutRefWorker.init_model`` builds it through ``get_rollout_class("hf", "async")``; the
trainer's weight sync (``ActorRolloutRefWorker.update_weights``, checkpoint-engine backend
``naive``) calls ``resume(["weights"])``, ``update_weights(actor.get_per_tensor_param())``,
``resume(["kv_cache"])``; ``release`` puts the server to sleep.

Weights travel as buckets of CPU tensors in the engine's dtype through Ray's object store, one
actor call each: for the models this backend is for (up to a few billion parameters) that is a
fraction of a second to seconds per sync, with no CUDA IPC to set up.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

import ray
import torch
from verl.utils.torch_dtypes import PrecisionType
from verl.workers.rollout.base import BaseRollout

from cuda_agent.recipe.hf_rollout.engine import tensor_digest
from cuda_agent.recipe.hf_rollout.replica import server_name

class HFServerAdapter(BaseRollout):
    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1):
        super().__init__(config, model_config, device_mesh)
        world = (self.config.tensor_model_parallel_size * self.config.data_parallel_size
                 * self.config.pipeline_model_parallel_size)
        rank = int(os.environ.get("RANK", "0"))
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.rollout_rank = rank % world
        self.dtype = PrecisionType.to_dtype(self.config.dtype)
        self.bucket_bytes = int(self.config.checkpoint_engine.update_weights_bucket_megabytes) << 20
        self._server: ray.actor.ActorHandle | None = None
        self.last_sync: dict | None = None

    @property
    def server(self) -> ray.actor.ActorHandle | None:
        """This rank's server (only rollout rank 0 of a replica talks to it), found lazily: the
        trainer starts the servers after the workers."""
        if self.rollout_rank != 0:
            return None
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        if self.config.free_cache_engine and self.server is not None:
            await self.server.wake_up.remote(tags=tags)

    async def release(self) -> None:
        if self.config.free_cache_engine and self.server is not None:
            await self.server.sleep.remote()

    @torch.no_grad()
    async def update_weights(self, weights: Iterable[tuple[str, torch.Tensor]], global_steps: int | None = None,
                             wire_format: str = "named_tensors", **kwargs) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(
                f"rollout.name=hf takes full tensors (wire_format named_tensors), not {wire_format!r}: "
                "use checkpoint_engine.backend=naive"
            )
        if kwargs.get("peft_config") is not None:
            raise NotImplementedError("rollout.name=hf does not serve LoRA adapters: set model.lora.merge=True")
        server = self.server
        if server is None:  # the tensors are gathered collectively: every rank walks them
            for _ in weights:
                pass
            return
        started = time.perf_counter()
        await server.begin_weight_sync.remote()
        bucket, size, sent = [], 0, []
        first = last = None
        for name, tensor in weights:
            cpu = tensor.detach().to("cpu", dtype=self.dtype if tensor.is_floating_point() else tensor.dtype)
            bucket.append((name, cpu))
            sent.append(name)
            size += cpu.numel() * cpu.element_size()
            first, last = first or (name, cpu), (name, cpu)
            if size >= self.bucket_bytes:
                await server.load_weights.remote(bucket)
                bucket, size = [], 0
        if bucket:
            await server.load_weights.remote(bucket)
        report = await server.finish_weight_sync.remote(global_steps)
        # proof that the sync landed: the server's copies hash as the actor's tensors did
        sent_digests = {pair[0]: tensor_digest(pair[1], self.dtype) for pair in (first, last) if pair is not None}
        served = await server.digests.remote(list(sent_digests))
        if served != sent_digests:
            raise RuntimeError(f"hf update_weights: the server's tensors differ from the actor's after the sync "
                               f"(served {served}, sent {sent_digests})")
        self.last_sync = {**report, "tensors": len(sent), "digests": served,
                          "wall_s": round(time.perf_counter() - started, 3)}
        # printed, as veRL prints its own lifecycle lines: the proof a run log must show every step
        print(f"hf update_weights: {len(sent)} tensors, {report['bytes'] / 2**20:.1f} MB, step {global_steps}, "
              f"digests {served}, {self.last_sync['wall_s']:.2f} s", flush=True)

    def generate_sequences(self, prompts):
        raise NotImplementedError("rollout.name=hf is server-mode only: generation goes through the agent loop")
