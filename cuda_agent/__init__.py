"""CUDA Agent on veRL: trusted CUDA-kernel evaluation, sandboxes, tools and RL recipes.

The import namespace maps onto the repository's top-level folders:

    cuda_agent               cuda_agent/          errors, CLI
    cuda_agent.sandbox_pool  sandbox_pool/        workspaces, harness, terminal sandboxes, pool
    cuda_agent.tools         tools/               veRL BaseTool classes
    cuda_agent.reward_fns    reward_fns/          reward schedules, veRL compute_score
    cuda_agent.data_gen      data_gen/            dataset synthesis pipeline
    cuda_agent.recipe        recipe/cuda_agent/   veRL recipe: agent loop, configs, scripts
"""

__version__ = "0.1.0"
