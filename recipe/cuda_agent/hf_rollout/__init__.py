"""``rollout.name=hf``: a transformers rollout server for veRL 0.9.1 (no vLLM needed).

    sampling.py       the request as veRL's vLLM server resolves it (max_tokens rule, EOS, refusals)
    engine.py         the model: batched decoding with log-probs, sleep/wake, weight sync by name
    server.py         HFServer, the async Ray actor the agent loops call (batching, abort, drain)
    replica.py        HFReplica, veRL's RolloutReplica that starts the server next to its worker
    adapter.py        HFServerAdapter, the actor worker's side: weight sync into the server
    registration.py   both veRL registries, called by the cuda_agent plugin

docs/training.md, "Training without vLLM", says what it is for, its limits and the overrides of a run.
"""
