"""llama.cpp's own tokenizer for a loaded GGUF, and the check that a draft shares it."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

from spec_decode.backends.llamacpp.library import llama_cpp
from spec_decode.backends.llamacpp.model import LlamaCppModel
from spec_decode.backends.prompts import render_chat_template

#: llama.cpp's names of the fill-in-the-middle tokens (``llama_vocab_fim_pre``, ...).
FIM = ("pre", "suf", "mid", "pad", "rep", "sep")


class LlamaCppTokenizer:
    """llama.cpp's own tokenizer for a loaded model, so text needs no transformers install."""

    def __init__(self, model: LlamaCppModel) -> None:
        self._model = model  # keeps the vocabulary's owner alive
        self._vocab = model._context.vocab
        self.vocab_size = model.vocab_size
        self.eog_ids = frozenset(
            t for t in range(self.vocab_size) if llama_cpp.llama_vocab_is_eog(self._vocab, t)
        )

    def encode(
        self, text: str, add_special_tokens: bool = True, parse_special: bool = True
    ) -> list[int]:
        """Token ids of ``text``; ``add_special_tokens`` adds BOS/EOS where the model asks for
        them, ``parse_special`` turns special-token text such as ``<|im_start|>`` into its id
        (the argument names follow transformers' tokenizers)."""
        data = text.encode("utf-8")
        capacity = len(data) + 8
        while True:
            buffer = (llama_cpp.llama_token * capacity)()
            n = llama_cpp.llama_tokenize(
                self._vocab, data, len(data), buffer, capacity, add_special_tokens, parse_special
            )
            if n >= 0:
                return list(buffer[:n])
            capacity = -n

    def piece(self, token: int, special: bool = False) -> bytes:
        """The bytes of one token (special tokens render as empty unless ``special``)."""
        size = 32
        while True:
            buffer = ctypes.create_string_buffer(size)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buffer, size, 0, special)
            if n >= 0:
                return buffer.raw[:n]
            size = -n

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """The text of ``ids`` (invalid UTF-8 from a cut multi-byte character is replaced)."""
        data = b"".join(self.piece(t, special=not skip_special_tokens) for t in ids)
        return data.decode("utf-8", "replace")

    def fim_tokens(self) -> dict[str, int]:
        """The fill-in-the-middle tokens llama.cpp found by their text when it loaded the
        vocabulary (Qwen's ``<|fim_prefix|>``, CodeLlama's ``<PRE>``, ...; no metadata keys
        needed), by its names: ``pre``, ``suf``, ``mid``, ``pad``, ``rep``, ``sep``; those the
        model lacks are left out."""
        found = {name: getattr(llama_cpp, f"llama_vocab_fim_{name}")(self._vocab) for name in FIM}
        return {name: int(token) for name, token in found.items() if token >= 0}

    def token_texts(self) -> list[bytes]:
        """Every token's stored text, in id order."""
        return [llama_cpp.llama_vocab_get_text(self._vocab, t) for t in range(self.vocab_size)]

    @property
    def chat_template(self) -> str | None:
        """The model's Jinja chat template from its GGUF metadata, if it has one."""
        template = llama_cpp.llama_model_chat_template(self._model._context.model, None)
        return template.decode("utf-8") if template else None

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        tokenize: bool = False,
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
    ) -> str:
        """The conversation (and the ``tools`` the model may call) as text, rendered from the
        GGUF's own template exactly as transformers renders it (so both backends see the same
        prompt), ending with the assistant turn's opening. Only the text form
        (``tokenize=False``) is offered."""
        if tokenize or not add_generation_prompt:
            raise ValueError("only tokenize=False, add_generation_prompt=True is supported")
        if self.chat_template is None:
            raise ValueError("this model has no chat template; send the prompt raw")
        return render_chat_template(self.chat_template, messages, tools=tools)


def check_pair(target: LlamaCppTokenizer, draft: LlamaCppTokenizer) -> None:
    """Raise ``ValueError`` unless the draft's tokenizer is the target's.

    Speculative decoding compares distributions over the same token ids, so the two GGUF files
    must list the same tokens in the same order and end generation on the same ids.
    """
    if target.vocab_size != draft.vocab_size:
        raise ValueError(
            f"draft and target vocabularies differ: {draft.vocab_size} vs "
            f"{target.vocab_size} tokens"
        )
    if target.token_texts() != draft.token_texts():
        raise ValueError("draft and target tokenizers differ: their token lists are not equal")
    if target.eog_ids != draft.eog_ids:
        raise ValueError("draft and target tokenizers differ in their end-of-generation tokens")


def load_tokenizer(model: LlamaCppModel) -> LlamaCppTokenizer:
    """The tokenizer stored in the model's GGUF file."""
    return LlamaCppTokenizer(model)
