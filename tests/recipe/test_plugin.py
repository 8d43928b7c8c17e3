"""The verl.plugins entry point registers our agent loops in every process that imports veRL.

veRL swallows a failing plugin import at DEBUG level, so each check runs in a fresh interpreter
that imports only ``verl`` and then inspects veRL's registry.
"""

import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent(
    """
    import sys
    import verl
    assert "cuda_agent.recipe.plugin" in sys.modules, "import verl did not load the cuda_agent plugin"
    from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
    print(sorted(name for name in _agent_loop_registry if name.startswith("cuda_agent")))
    print(_agent_loop_registry["cuda_agent"]["_target_"])
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn
    print(get_adv_estimator_fn("cuda_agent_grpo").__module__)
    """
)


def run_python(code: str, **env) -> str:
    import os

    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env={**os.environ, **env}
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stdout


def test_entry_point_loads_without_error():
    """Load the entry point the way veRL does, but let errors surface."""
    out = run_python(
        "from importlib.metadata import entry_points\n"
        "eps = [ep for ep in entry_points(group='verl.plugins') if ep.name == 'cuda_agent']\n"
        "assert len(eps) == 1, eps\n"
        "print(eps[0].value); eps[0].load()\n"
    )
    assert out.strip() == "cuda_agent.recipe.plugin"


def test_plain_import_verl_registers_our_agent_loops():
    out = run_python(PROBE).splitlines()
    assert out[0] == "['cuda_agent', 'cuda_agent_single_turn']"
    assert out[1] == "cuda_agent.recipe.agent_loop.CudaAgentLoop"
    assert out[2] == "cuda_agent.recipe.advantage"  # the trainer's driver resolves our estimator by name


def test_registered_class_is_instantiable_by_hydra_target():
    out = run_python(
        "import verl, hydra\n"
        "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry, AgentLoopBase\n"
        "for name in ('cuda_agent', 'cuda_agent_single_turn'):\n"
        "    cls = hydra.utils.get_class(_agent_loop_registry[name]['_target_'])\n"
        "    assert issubclass(cls, AgentLoopBase), cls\n"
        "print('ok')\n"
    )
    assert out.strip() == "ok"


@pytest.mark.ray
def test_ray_worker_processes_register_it_too():
    """A Ray worker that only imports verl (as veRL's actors do) sees the registration."""
    out = run_python(
        textwrap.dedent(
            """
            import ray
            ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)

            @ray.remote
            def probe():
                import os, sys
                import verl
                from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
                return os.getpid(), "cuda_agent" in _agent_loop_registry

            pid, registered = ray.get(probe.remote())
            import os
            assert pid != os.getpid()
            print(registered)
            ray.shutdown()
            """
        ),
        RAY_ENABLE_UV_RUN_RUNTIME_ENV="0",
    )
    assert out.strip().splitlines()[-1] == "True"


ROLLOUT_PROBE = textwrap.dedent(
    """
    import verl
    from verl.workers.rollout.base import get_rollout_class
    from verl.workers.rollout.replica import RolloutReplica, get_rollout_replica_class
    from verl.workers.rollout.base import BaseRollout
    replica, adapter = get_rollout_replica_class("hf"), get_rollout_class("hf", "async")
    assert issubclass(replica, RolloutReplica) and issubclass(adapter, BaseRollout)
    print(replica.__module__ + "." + replica.__name__)
    print(adapter.__module__ + "." + adapter.__name__)
    """
)
ROLLOUT_CLASSES = ["cuda_agent.recipe.hf_rollout.replica.HFReplica", "cuda_agent.recipe.hf_rollout.adapter.HFServerAdapter"]


def test_rollout_name_hf_resolves_in_both_verl_registries():
    """The TaskRunner's RolloutReplicaRegistry (public) and the worker's _ROLLOUT_REGISTRY (private in
    0.9.1): a veRL upgrade that moves either must fail here, not in a training run."""
    assert run_python(ROLLOUT_PROBE).split() == ROLLOUT_CLASSES


def test_without_the_entry_point_verl_use_external_modules_registers_it():
    """Where the package is not pip-installed (the GPU node's namespace links), no entry point is found;
    VERL_USE_EXTERNAL_MODULES loads the plugin instead."""
    out = run_python(ROLLOUT_PROBE, VERL_USE_EXTERNAL_PLUGINS="none", VERL_USE_EXTERNAL_MODULES="cuda_agent.recipe.plugin")
    assert out.split() == ROLLOUT_CLASSES
    with pytest.raises(AssertionError, match="Unknown rollout mode: hf"):
        run_python(ROLLOUT_PROBE, VERL_USE_EXTERNAL_PLUGINS="none")
