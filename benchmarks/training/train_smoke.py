"""One RFT step (veRL's sft_trainer under torchrun) and one value pre-training run, end to end.

The GPU node's ``train`` phase (scripts/gpu-session.sh) runs this; it also runs on CPU
(``--device cpu``, gloo) for checking the phase before a GPU session. Nothing is downloaded:

- tokenizer: the offline byte-level BPE of tests/recipe/offline_model.py with a Qwen3-style ChatML
  template that renders tools (tests/recipe/records_data.py);
- model: a Llama with SmolLM2-135M's shape (576 hidden, 30 layers, 9 heads / 3 KV heads) built from
  its config with random weights (``--tiny``: 2 layers of 64 for CPU), saved as a Hugging Face folder;
- data: trajectory records built like the tests' (cuda_agent.recipe.records), through
  ``cuda-agent rft filter``;
- ``torchrun --nproc_per_node=1 -m verl.trainer.sft_trainer`` with recipe/cuda_agent/config/
  cuda_agent_rft_sft.yaml for ``--sft-steps`` steps (SDPA attention: no flash-attn on the node);
- ``cuda-agent value pretrain`` for ``--value-steps`` steps on the same trajectories, then the critic
  is loaded back as veRL's critic loads it (AutoModelForTokenClassification, one label).

Writes ``summary.json`` (times, losses, return codes) and the logs into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "recipe"))


def build_model(folder: Path, tiny: bool) -> Path:
    from offline_model import build_tokenizer
    from records_data import qwen3_style_template
    from transformers import AutoModelForCausalLM, LlamaConfig

    tokenizer = build_tokenizer()
    tokenizer.chat_template = qwen3_style_template()
    shape = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2) if tiny else dict(hidden_size=576, intermediate_size=1536,
                                                          num_hidden_layers=30, num_attention_heads=9,
                                                          num_key_value_heads=3)
    config = LlamaConfig(vocab_size=len(tokenizer), max_position_embeddings=8192, rope_theta=100000.0,
                         tie_word_embeddings=True, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=None, **shape)
    model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def build_trajectories(folder: Path) -> Path:
    from records_data import call, conversation, good_turns, record

    from cuda_agent.recipe.records import RecordWriter

    with RecordWriter(folder, shard_prefix="smoke") as writer:
        for index in range(8):
            turns = good_turns()[: 1 + index % 3]
            writer.write(record(conversation(turns, final=f"Done {index}."), reward=1.0 - 0.2 * (index % 4),
                                task_id=f"smoke/{index}"))
        writer.write(record(conversation([[call("Browse", {"url": "x"})]]), task_id="smoke/unknown_tool"))
        writer.write(record(infra_failure=True, reward=None, status="infra_error", task_id="smoke/infra"))
    return folder


def run(command: list[str], log: Path, env: dict, timeout: int) -> dict:
    started = time.monotonic()
    with log.open("w") as stream:
        try:
            code = subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT, env=env, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = 124
    return {"command": " ".join(command), "rc": code, "wall_s": round(time.monotonic() - started, 1)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--tiny", action="store_true", help="a 2-layer model (CPU)")
    parser.add_argument("--sft-steps", type=int, default=1)
    parser.add_argument("--value-steps", type=int, default=3)
    parser.add_argument("--timeout", type=int, default=150, help="per command, seconds")
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    summary: dict = {"device": args.device, "tiny": args.tiny}
    started = time.monotonic()
    model = build_model(work / "model", args.tiny)
    trajectories = build_trajectories(work / "trajectories")
    summary["setup_s"] = round(time.monotonic() - started, 1)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cli = [sys.executable, "-P", "-m", "cuda_agent.cli.main"]

    sft = work / "sft.parquet"
    summary["rft_filter"] = run([*cli, "rft", "filter", str(trajectories), "--out", str(sft), "--json"],
                                out / "rft_filter.log", env, args.timeout)
    summary["sft"] = run(
        [sys.executable, "-P", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1",
         "-m", "verl.trainer.sft_trainer", f"--config-path={REPO / 'recipe/cuda_agent/config'}",
         "--config-name=cuda_agent_rft_sft", f"model.path={model}", f"data.train_files={sft}",
         "data.max_length=8192", "data.max_token_len_per_gpu=8192", "data.train_batch_size=4",
         "data.micro_batch_size_per_gpu=1", "data.num_workers=0", "engine.ulysses_sequence_parallel_size=1",
         "engine.use_torch_compile=false", "+model.override_config.attn_implementation=sdpa",
         f"trainer.total_training_steps={args.sft_steps}", f"trainer.device={args.device}",
         "trainer.logger=[console]", f"trainer.default_local_dir={work / 'rft'}", "trainer.resume_mode=disable",
         "checkpoint.save_contents=[hf_model]"],
        out / "sft.log", env, args.timeout,
    )
    summary["sft"]["hf_checkpoint"] = sorted(str(p) for p in (work / "rft").glob("global_step_*/huggingface"))

    critic = work / "critic"
    summary["value"] = run(
        [*cli, "value", "pretrain", str(trajectories), "--model", str(model), "--out", str(critic),
         "--steps", str(args.value_steps), "--batch-size", "4", "--lr", "1e-4", "--device", args.device,
         "--dtype", "bfloat16" if args.device == "cuda" else "float32", "--max-length", "8192", "--json"],
        out / "value.log", env, args.timeout,
    )
    if (critic / "value_pretrain.json").exists():
        summary["value"]["result"] = json.loads((critic / "value_pretrain.json").read_text())
        from transformers import AutoModelForTokenClassification

        loaded = AutoModelForTokenClassification.from_pretrained(critic)
        summary["value"]["critic_num_labels"] = loaded.config.num_labels
    summary["wall_s"] = round(time.monotonic() - started, 1)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    ok = all(summary[k]["rc"] == 0 for k in ("rft_filter", "sft", "value")) and summary["sft"]["hf_checkpoint"]
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
