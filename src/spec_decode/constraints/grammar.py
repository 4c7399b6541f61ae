"""A grammar as a processor: llguidance's matcher, kept at the tokens it last read, masks each
row with the grammar's state after that row's own history.

A drafted block's rows follow the committed tokens and then drafts 1, 2, ...: the matcher reads
them one by one, so row i is masked by the state after drafts 1..i; the next step's history
shares a prefix with this one (the emitted tokens), and the matcher rolls back to that prefix
before reading on. So a rejected draft leaves nothing behind, and every row's mask is a function
of its history alone (:class:`~spec_decode.core.processors.Processor`). A row after a draft the
grammar refuses is left unmasked: that draft has probability 0 and is never accepted.

llguidance was chosen over xgrammar and outlines-core, measured on the 151,936-token Qwen2.5
vocabulary (bench/constrained/grammar_engines.py; BENCHMARKS.md): the cheapest mask and grammar
compilation of the three, ``rollback(n)`` on the matcher itself (bitwise the mask it had), no torch,
and a plain list of token bytes as its vocabulary.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from spec_decode.core.errors import BadRequest
from spec_decode.core.processors import keep_only

#: The first byte llguidance reads as "a special token, not text".
SPECIAL = b"\xff"


@dataclass(frozen=True)
class Grammar:
    """An llguidance grammar (its JSON or Lark text) and the request field it came from, which a
    refusal names."""

    text: str
    param: str


def token_bytes(tokenizer: Any, vocab_size: int) -> list[bytes]:
    """Every token's bytes as llguidance reads them: its text, or its name after
    :data:`SPECIAL` for a control token (one that renders only as a special token)."""
    tokens = []
    for token in range(vocab_size):
        text = tokenizer.piece(token)
        tokens.append(text if text else SPECIAL + tokenizer.piece(token, special=True))
    return tokens


class _Vocabulary:
    """What llguidance asks of a tokenizer: the tokens' bytes, the end tokens, and encoding.

    Encoding is the model's own where its tokens spell the text exactly, and longest match
    over the tokens' bytes where they do not (a SentencePiece tokenizer puts a word boundary
    before the text, which llguidance would then force into the answer)."""

    def __init__(self, tokenizer: Any, tokens: list[bytes], stop_ids: Collection[int]) -> None:
        self.tokens, self.special_token_ids = tokens, sorted(stop_ids)
        self.eos_token_id, self.bos_token_id = min(stop_ids), None
        self._tokenizer = tokenizer
        self._ids = {text: i for i, text in enumerate(tokens) if text and text[:1] != SPECIAL}
        self._longest = max(map(len, self._ids), default=1)

    def __call__(self, text: str | bytes) -> list[int]:
        data = text if isinstance(text, bytes) else text.encode()
        ids = list(self._tokenizer.encode(data.decode(errors="replace"), add_special_tokens=False))
        if b"".join(self.tokens[i] for i in ids) == data:
            return ids
        ids, at = [], 0
        while at < len(data):
            for size in range(min(self._longest, len(data) - at), 0, -1):
                if data[at : at + size] in self._ids:
                    ids.append(self._ids[data[at : at + size]])
                    at += size
                    break
            else:
                raise ValueError(f"no token spells byte {data[at]:#x} of {text!r}")
        return ids


def grammar_tokenizer(tokenizer: Any, vocab_size: int, stop_ids: Collection[int]) -> Any:
    """llguidance's tokenizer for a model: its tokens' bytes (from llama.cpp's ``piece``, or a
    Hugging Face fast tokenizer as it is), with the model's end-of-generation tokens as the
    tokens a finished grammar allows. A model row's ids past the tokenizer's (padding) are never
    allowed. Slow on a large vocabulary (a pass over every token): build once."""
    import llguidance

    stops = sorted(stop_ids)
    if hasattr(tokenizer, "piece"):
        vocabulary = _Vocabulary(tokenizer, token_bytes(tokenizer, vocab_size), stops)
        wrapper = llguidance.TokenizerWrapper(vocabulary)
        return llguidance.LLTokenizer(wrapper, n_vocab=vocab_size, eos_token=stops)
    from llguidance.hf import from_tokenizer

    return from_tokenizer(getattr(tokenizer, "wrapped", tokenizer), eos_token=stops)


def check_grammar(grammar: Grammar, tokenizer: Any) -> None:
    """A :class:`BadRequest` naming the grammar's field unless llguidance compiles it and the
    model's vocabulary can begin to write it."""
    import llguidance

    failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar.text, tokenizer)
    if failed:
        raise BadRequest(f"the grammar does not compile: {messages[0]}", grammar.param)
    first = np.flatnonzero(GrammarMask(grammar, tokenizer)._allowed(tokenizer.vocab_size))
    if set(first.tolist()) <= set(tokenizer.eos_tokens):
        raise BadRequest("the model's vocabulary cannot write this grammar", grammar.param)


class GrammarMask:
    """Masks every row with ``grammar``'s allowed tokens after that row's history (see the
    module's docstring); one instance per model and request, since it keeps a matcher."""

    def __init__(self, grammar: Grammar, tokenizer: Any) -> None:
        import llguidance

        self._matcher = llguidance.LLMatcher(tokenizer, grammar.text, log_level=0)
        if self._matcher.is_error():
            raise BadRequest(
                f"the grammar does not compile: {self._matcher.get_error()}", grammar.param
            )
        self._read: list[int] = []  # the tokens the matcher has consumed, in order
        self._bits = np.zeros((tokenizer.vocab_size + 31) // 32, dtype=np.int32)
        self._stops = list(tokenizer.eos_tokens)

    def process(
        self, done: Sequence[int], paths: Sequence[Sequence[int]], rows: np.ndarray
    ) -> None:
        for row, path in zip(rows, paths, strict=True):
            if not self._reach([*done, *path]):
                continue
            keep_only(row, self._allowed(row.size))

    def _reach(self, history: list[int]) -> bool:
        """Bring the matcher to the state after ``history``: roll back to the longest prefix it
        shares with what was read, then read the rest. False if the grammar refuses a token."""
        shared = min(len(self._read), len(history))
        if self._read[:shared] != history[:shared]:  # one comparison in C in the common case
            shared = next(
                i for i, (a, b) in enumerate(zip(self._read, history, strict=False)) if a != b
            )
        if shared < len(self._read):
            self._matcher.rollback(len(self._read) - shared)
            del self._read[shared:]
        rest = history[shared:]
        consumed = self._matcher.try_consume_tokens(rest) if rest else 0
        self._read.extend(rest[:consumed])
        return consumed == len(rest)

    def _allowed(self, size: int) -> np.ndarray:
        """The current state's allowed tokens as a boolean row of ``size`` entries; the end
        tokens alone where the grammar allows nothing (after its own end, or at a point the
        vocabulary cannot spell a way on from): generation stops there."""
        allowed = np.zeros(size, dtype=bool)
        if not self._matcher.is_stopped():
            self._matcher.unsafe_compute_mask_ptr(self._bits.ctypes.data, self._bits.nbytes)
            bits = np.unpackbits(self._bits.view(np.uint8), bitorder="little")
            n = min(size, bits.size)
            allowed[:n] = bits[:n].astype(bool)
        if not allowed.any():
            allowed[self._stops] = True
        return allowed
