"""Critics load with the attention their config asks for, not always flash-attn.

veRL 0.9.1 builds a critic (``critic.model``, FSDP engine) through
``verl.utils.model.load_valuehead_model``, which passes ``attn_implementation="flash_attention_2"``
to ``from_pretrained`` whatever ``critic.model.override_config.attn_implementation`` says. Without the
``flash_attn`` package (CPU machines, a GPU node that cannot build it) every stage with a critic
(stage 1 and stage 4, GAE) then fails at worker start, although the actor honours the same override.

``install()`` (called by the plugin in every veRL process) wraps that loader: when the critic's
config names another implementation (``sdpa``, ``eager``), the token-classification head is loaded
with it; when it names ``flash_attention_2`` or nothing, veRL's own loader runs unchanged.
"""

from __future__ import annotations

from typing import Any

FLASH_ATTENTION = "flash_attention_2"


def requested_attention(model_config: Any) -> str | None:
    """The attention implementation the critic's Hugging Face config carries (set by veRL from
    ``override_config.attn_implementation``), or None."""
    return getattr(model_config, "_attn_implementation", None)


def load_value_model(local_path: str, torch_dtype: Any, model_config: Any, trust_remote_code: bool) -> Any:
    """veRL's ``load_valuehead_model``, honouring the config's attention implementation."""
    from transformers import AutoModelForTokenClassification

    from verl.utils import model as verl_model

    attention = requested_attention(model_config)
    if attention in (None, FLASH_ATTENTION):
        return _VERL_LOADER(local_path, torch_dtype, model_config, trust_remote_code)
    try:
        return AutoModelForTokenClassification.from_pretrained(
            pretrained_model_name_or_path=local_path,
            torch_dtype=torch_dtype,
            config=model_config,
            attn_implementation=attention,
            trust_remote_code=trust_remote_code,
        )
    except ValueError as error:  # an architecture without a token-classification head
        raise RuntimeError(
            f"critic model {local_path!r} has no AutoModelForTokenClassification head for "
            f"attn_implementation={attention!r} ({error}); set "
            f"critic.model.override_config.attn_implementation={FLASH_ATTENTION} to use veRL's "
            f"value-head loader ({verl_model.__name__}.load_valuehead_model)"
        ) from error


_VERL_LOADER: Any = None


def install() -> None:
    """Route veRL's critic loading through :func:`load_value_model` (idempotent)."""
    global _VERL_LOADER
    from verl.utils import model as verl_model

    if verl_model.load_valuehead_model is load_value_model:
        return
    _VERL_LOADER = verl_model.load_valuehead_model
    verl_model.load_valuehead_model = load_value_model
