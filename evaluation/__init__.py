"""Evaluation: the standalone agent runner (``cuda-agent run``) and reports (``cuda-agent report``).

The runner drives the same agent as training (prompt, SKILL.md, tools, sandbox, evaluator,
limits; one implementation of a turn: ``cuda_agent.recipe.turns``) against any
OpenAI-compatible chat endpoint, on tasks from our parquet datasets, a folder of problem files
or a KernelBench checkout, and writes a results JSONL plus trajectory records. See
docs/evaluation.md.
"""
