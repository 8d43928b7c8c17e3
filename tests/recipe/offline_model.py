"""A real tokenizer and model folder built offline, for veRL's HFModelConfig / AgentLoopWorker.

A byte-level BPE (so any text round-trips) trained in-process on a small corpus, wrapped as a
``PreTrainedTokenizerFast`` with a ChatML Jinja template that renders tools and hermes-style
``<tool_call>`` JSON, saved next to a tiny Qwen2 ``config.json`` (model_type ``qwen2`` selects
veRL's Qwen continuous-token builder, as a real Qwen2.5 / Qwen3 checkpoint would).
"""

from __future__ import annotations

import json
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"]

CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions. Their signatures are in <tools></tools>:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each call, return a JSON object inside <tool_call></tool_call> tags:\\n' }}"
    "{{- '<tool_call>\\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and loop.first %}"
    "{%- elif message.role in ['user', 'system'] %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}"
    "{{- '<|im_start|>assistant\\n' + (message.content or '') }}"
    "{%- for call in message.tool_calls or [] %}"
    "{{- '\\n<tool_call>\\n{\"name\": \"' + call.function.name + '\", \"arguments\": ' }}"
    "{{- call.function.arguments | tojson }}{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

_CORPUS = [
    "import torch\nimport torch.nn as nn\nimport cuda_extension\n",
    "class ModelNew(nn.Module):\n    def forward(self, A, B):\n        return cuda_extension.diag_matmul(A, B)\n",
    '{"name": "Write", "arguments": {"file_path": "model_new.py", "content": "x"}}',
    '{"name": "Bash", "arguments": {"command": "bash utils/compile.sh"}}',
    "python3 -m utils.verification && python3 -m utils.profiling\n",
    "#include <torch/types.h>\n#include <torch/csrc/utils/pybind.h>\nREGISTER_BINDING(diag_matmul, f);\n",
    "You are an expert in writing fast kernels. The task, the device and the tools.\n",
]


def build_tokenizer():
    """The trained tokenizer (transformers PreTrainedTokenizerFast)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600, special_tokens=SPECIAL_TOKENS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    core.train_from_iterator(_CORPUS * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
    )
    tokenizer.add_tokens(ADDED_TOKENS)
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def write_model_dir(folder: Path) -> Path:
    """Tokenizer files and a tiny Qwen2 config.json in ``folder`` (returned)."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(folder)
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "vocab_size": len(tokenizer),
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 262144,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "bos_token_id": None,
        "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": tokenizer.eos_token_id}))
    return folder
