"""Prompt text to token ids the way each model is meant to be asked."""

from __future__ import annotations

from typing import Any

#: A transformers tokenizer or :class:`spec_decode.backends.llamacpp.LlamaCppTokenizer`: both
#: have ``chat_template``, ``apply_chat_template``, ``encode`` and ``decode``.
Tokenizer = Any


def encode_prompt(tokenizer: Tokenizer, prompt: str, raw: bool) -> list[int]:
    """Token ids of ``prompt``: through the chat template (one user message, then the assistant
    turn's opening) when the tokenizer has one and not ``raw``; as plain text otherwise."""
    if not raw and tokenizer.chat_template:
        messages = [{"role": "user", "content": prompt}]
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return tokenizer.encode(text, add_special_tokens=False)
    return tokenizer.encode(prompt)
