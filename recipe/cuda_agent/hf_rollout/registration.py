"""Makes ``actor_rollout_ref.rollout.name=hf`` resolvable in both of veRL's rollout registries.

- ``RolloutReplicaRegistry`` (public, ``verl/workers/rollout/replica.py``): the TaskRunner's
  ``LLMServerManager`` builds ``HFReplica``s from it.
- ``verl.workers.rollout.base._ROLLOUT_REGISTRY`` (a private dict in 0.9.1): the actor worker's
  ``get_rollout_class("hf", "async")`` builds ``HFServerAdapter`` from it.

Both loaders import lazily, so ``import verl`` stays cheap. tests/recipe/test_hf_rollout_registration.py
pins both: a veRL upgrade that moves either fails there, loudly, not in a training run.
"""

from __future__ import annotations

ROLLOUT_NAME = "hf"
ADAPTER = "cuda_agent.recipe.hf_rollout.adapter.HFServerAdapter"


def _load_replica():
    from cuda_agent.recipe.hf_rollout.replica import HFReplica

    return HFReplica


def register() -> None:
    from verl.workers.rollout import base
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    RolloutReplicaRegistry.register(ROLLOUT_NAME, _load_replica)
    base._ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = ADAPTER
