"""The hf rollout engine alone (recipe/cuda_agent/hf_rollout/engine.py) on any device, no veRL needed.

For a GPU node without veRL or Ray: a Llama with SmolLM2-135M-Instruct's shape (576 hidden, 30 layers,
9 heads / 3 KV heads, 49152 vocabulary) and random weights, in ``--dtype``; ``batch`` prompts of
``--prompt-tokens`` random tokens decode ``--tokens`` tokens each (EOS ignored), temperature 1, with
log-probs. Reports generated tokens per second (median of ``--repeats``) and checks that the returned
log-probs equal ``log_softmax(logits / T)`` of an independent full forward pass in fp32 (max abs diff).

    python benchmarks/training/bench_hf_engine.py --device cuda --out hf_engine_cuda.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

SMOLLM2_SHAPE = dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                     num_key_value_heads=3, vocab_size=49152, max_position_embeddings=8192, tie_word_embeddings=True,
                     rms_norm_eps=1e-5, rope_theta=100000.0)


def build_model(dtype: torch.dtype, device: str):
    from transformers import AutoModelForCausalLM, LlamaConfig

    torch.manual_seed(0)
    config = LlamaConfig(**SMOLLM2_SHAPE, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    return AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa").to(device)


def requests(count: int, tokens: int, log_probs: bool):
    from cuda_agent.recipe.hf_rollout.sampling import resolve

    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": log_probs, "max_tokens": tokens,
              "ignore_eos": True}
    return [resolve(params, prompt_len=1, max_model_len=8192, prompt_length=4096, response_length=4096)] * count


def main(args: argparse.Namespace) -> dict:
    from cuda_agent.recipe.hf_rollout.engine import HFEngine

    dtype = getattr(torch, args.dtype)
    engine = HFEngine(build_model(dtype, args.device), eos_token_ids={2}, pad_token_id=2, seed=0)
    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randint(3, 49152, (args.prompt_tokens,), generator=generator).tolist() for _ in range(8)]
    engine.generate(prompts[:1], requests(1, 4, False))  # warm-up
    rows = []
    for batch in args.batches:
        for log_probs in (False, True):
            rates = []
            for _ in range(args.repeats):
                if args.device == "cuda":
                    torch.cuda.synchronize()
                started = time.perf_counter()
                outputs = engine.generate(prompts[:batch], requests(batch, args.tokens, log_probs))
                if args.device == "cuda":
                    torch.cuda.synchronize()
                rates.append(batch * args.tokens / (time.perf_counter() - started))
                assert all(len(o.token_ids) == args.tokens for o in outputs)
            row = {"batch": batch, "log_probs": log_probs, "tokens_per_s": round(statistics.median(rates), 1),
                   "runs": [round(r, 1) for r in rates]}
            print(json.dumps(row), file=sys.stderr, flush=True)
            rows.append(row)

    # the returned log-probs against an independent fp32 pass of the same weights
    fp32 = build_model(torch.float32, args.device)
    fp32.load_state_dict({k: v.float() for k, v in engine.model.state_dict().items()})
    check = HFEngine(fp32, eos_token_ids={2}, pad_token_id=2, seed=0)
    torch.backends.cuda.matmul.allow_tf32 = False
    outputs = check.generate(prompts[:4], requests(4, 16, True))
    worst = 0.0
    with torch.no_grad():
        for prompt, output in zip(prompts[:4], outputs, strict=True):
            ids = torch.tensor([prompt + output.token_ids], device=args.device)
            logits = fp32(ids).logits[0, len(prompt) - 1: -1].float()
            expected = torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt):, None]).squeeze(-1).cpu()
            worst = max(worst, (expected - torch.tensor(output.log_probs)).abs().max().item())
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    return {"command": " ".join(["python", *sys.argv]), "model": "Llama, SmolLM2-135M shape, random weights",
            "dtype": args.dtype, "device": device_name, "torch": torch.__version__,
            "prompt_tokens": args.prompt_tokens, "tokens_per_request": args.tokens, "results": rows,
            "log_prob_max_abs_diff_fp32": worst}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    summary = main(args)
    text = json.dumps(summary, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
