"""``HFReplica``: veRL's ``RolloutReplica`` for the transformers server (``rollout.name=hf``).

veRL's ``LLMServerManager`` builds one replica per ``tp * dp * pp`` workers and calls
``init_hybrid(actor_worker_group)``; ``launch_servers`` then starts one ``HFServer`` actor on the
node of the replica's worker, on the GPU Ray gave that worker (the vLLM replica's placement, minus
its HTTP server). With tensor parallel size 1 every GPU is a replica.
"""

from __future__ import annotations

import asyncio

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from verl.plugin.platform import get_platform
from verl.utils.device import get_resource_name
from verl.workers.rollout.replica import RolloutReplica

from cuda_agent.recipe.hf_rollout.server import HFServer

SERVER_NAME_PREFIX = "hf_"


def server_name(replica_rank: int, kind: str = "", suffix: str = "") -> str:
    """The Ray actor name of a replica's server (``kind``: "reward_" or "teacher_" for those replicas);
    the worker-side adapter finds the policy's by this name."""
    return f"{SERVER_NAME_PREFIX}server_{kind}{replica_rank}_0{suffix}"


def server_address(replica_rank: int) -> str:
    """An opaque, unique key for veRL's router (no HTTP: the loops call the actor directly)."""
    return f"{ray.util.get_node_ip_address()}:hf-{replica_rank}"


def start_server(config, model_config, *, replica_rank: int, node_id: str | None = None,
                 cuda_visible_devices: str | None = None, max_concurrency: int = 1000,
                 name: str | None = None) -> ray.actor.ActorHandle:
    """Start an ``HFServer`` actor (pinned to ``node_id`` when given). The actor takes no CPU of
    Ray's count: its work is on the GPU, and on a small host every logical CPU is spoken for by
    the agent-loop workers, TransferQueue and the reward workers."""
    env_vars = {**{var: "1" for var in get_platform().ray_noset_envvars()}, **get_platform().rollout_env_vars()}
    options = {"runtime_env": {"env_vars": env_vars}, "max_concurrency": max_concurrency, "num_cpus": 0,
               "name": name or server_name(replica_rank)}
    if node_id is not None:
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)
    return ray.remote(HFServer).options(**options).remote(
        config=config, model_config=model_config, replica_rank=replica_rank,
        cuda_visible_devices=cuda_visible_devices,
    )


class HFReplica(RolloutReplica):
    """One ``HFServer`` per replica; tensor parallel size 1 only."""

    async def launch_servers(self) -> None:
        if self.world_size != 1:
            raise ValueError(
                f"rollout.name=hf runs one GPU per replica: set tensor_model_parallel_size, data_parallel_size "
                f"and pipeline_model_parallel_size to 1 (their product is {self.world_size})"
            )
        if len(self.workers) != 1:
            raise RuntimeError(f"replica {self.replica_rank} got {len(self.workers)} workers, expected 1")

        def locate(_worker):
            context = ray.get_runtime_context()
            accelerators = context.get_accelerator_ids().get(get_resource_name()) or []
            return context.get_node_id(), (str(accelerators[0]) if accelerators else None)

        node_id, device = await self.workers[0].__ray_call__.remote(locate)
        kind = "reward_" if self.is_reward_model else "teacher_" if self.is_teacher_model else ""
        server = start_server(
            self.config, self.model_config, replica_rank=self.replica_rank, node_id=node_id,
            cuda_visible_devices=device, max_concurrency=self.max_concurrency,
            name=server_name(self.replica_rank, kind, self.name_suffix),
        )
        await server.parameter_names.remote()  # the model is built: fail here, not at the first generate
        self.servers = [server]
        self._server_handle = server
        self._server_address = server_address(self.replica_rank)

    async def sleep(self) -> None:
        """Drain, then sleep (as the vLLM replica does)."""
        await self.servers[0].wait_for_requests_to_drain.remote()
        await asyncio.gather(*[server.sleep.remote() for server in self.servers])

    async def abort_all_requests(self, reject_request: bool = False) -> dict:
        results = await asyncio.gather(
            *[server.abort_all_requests.remote(reject_request=reject_request) for server in self.servers]
        )
        return {"aborted_count": sum(r["aborted_count"] for r in results),
                "request_ids": [i for r in results for i in r["request_ids"]], "server_results": results}
