"""veRL plugin: makes our agent loops resolvable by name in every process that imports veRL.

veRL 0.9.1 loads every ``verl.plugins`` entry point at the end of ``import verl``
(``verl/__init__.py``), so this module runs in the driver, the TaskRunner and every Ray
worker (agent-loop workers included) without any configuration. It is declared in
pyproject.toml::

    [project.entry-points."verl.plugins"]
    cuda_agent = "cuda_agent.recipe.plugin"

Importing the loop modules registers them through veRL's own ``@register`` decorator:

    cuda_agent                 agentic rollout: workspace + sandbox + tools, scores the final workspace
    cuda_agent_single_turn     one answer with fenced files, scored by the configured compute_score

``hf_rollout.registration.register()`` makes ``actor_rollout_ref.rollout.name=hf`` (the transformers
rollout server, no vLLM) resolvable in veRL's replica and rollout-class registries, and importing
``advantage`` registers the ``cuda_agent_grpo`` and ``cuda_agent_rloo`` advantage
estimators (GRPO and RLOO over the samples that are not infrastructure failures) through veRL's
``register_adv_est``. ``critic_attention.install()`` lets critics load with the attention their config
names (veRL 0.9.1 hardcodes flash-attn there; see that module).

veRL swallows a failing plugin import at DEBUG level (the loop then silently "is not
registered"); tests/recipe/test_plugin.py imports veRL in a fresh process to catch that.
If ``VERL_USE_EXTERNAL_PLUGINS`` is set to a list of names, it must contain ``cuda_agent``. Where the
package is not pip-installed (entry points are not discovered), set
``VERL_USE_EXTERNAL_MODULES=cuda_agent.recipe.plugin``: ``import verl`` imports it too.
"""

from __future__ import annotations

import os

from cuda_agent.recipe import advantage, agent_loop, critic_attention, single_turn
from cuda_agent.recipe.cpu_platform import platform as _cpu_platform  # registers "cpu"
from cuda_agent.recipe.hf_rollout import registration

registration.register()
critic_attention.install()
if os.environ.get("VERL_PLATFORM", "").strip().lower() == "cpu":
    _cpu_platform.register_cpu_engines()

AGENT_LOOP_NAMES = (agent_loop.AGENT_NAME, single_turn.AGENT_NAME)
"""Names under which this plugin registers agent loops in veRL's registry."""

ADVANTAGE_ESTIMATORS = advantage.ESTIMATOR_NAMES
"""Names under which this plugin registers advantage estimators in veRL's registry."""

ROLLOUT_NAMES = (registration.ROLLOUT_NAME,)
"""Names under which this plugin registers rollout backends (``actor_rollout_ref.rollout.name``)."""

__all__ = ["ADVANTAGE_ESTIMATORS", "AGENT_LOOP_NAMES", "ROLLOUT_NAMES"]
