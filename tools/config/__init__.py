"""Tool configs shipped with the package (a package so that the YAML is installed with it).

`TOOLS_YAML` is the veRL tool config of the CUDA agent: pass it as
``actor_rollout_ref.rollout.multi_turn.tool_config_path``.
"""

from pathlib import Path

TOOLS_YAML = Path(__file__).with_name("cuda_agent_tools.yaml")
