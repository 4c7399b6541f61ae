"""Fill-in-the-middle prompts: the text before and after a gap, written with the model's own FIM
tokens, for the model to write the middle.

The tokens are found by their text in the vocabulary, as llama.cpp finds them when it loads a
GGUF (Qwen2.5-Coder's ``<|fim_prefix|>``, StarCoder's ``<fim_prefix>``, CodeLlama's ``<PRE>``,
...: no ``fim`` metadata key is needed). Two layouts:

* :func:`encode_fim`: ``[BOS]<PRE>prefix<SUF>suffix<MID>``, what a text completion with a
  ``suffix`` asks for;
* :func:`encode_infill`: llama-server's ``/infill`` prompt (its ``format_infill``): the extra
  context first, in the repository-level layout where the model has ``<|repo_name|>`` and
  ``<|file_sep|>`` (Qwen2.5-Coder), then ``[BOS]<PRE>prefix prompt<SUF>suffix<MID>``, each part
  cut to llama-server's budget.

The prefix, suffix and extra context are code, tokenized as plain text: control-token text in
them (``<|im_end|>`` in a file about chat templates) stays text. Only ``/infill``'s ``prompt`` has
control-token text parsed, as llama-server parses it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from spec_decode.backends.prompts import Tokenizer, encode_literally

#: How a FIM token is spelled, by llama.cpp's name, for tokenizers that cannot say which tokens
#: they have (transformers'): Qwen2.5-Coder's, then StarCoder's.
SPELLINGS = {
    "pre": ("<|fim_prefix|>", "<fim_prefix>"),
    "suf": ("<|fim_suffix|>", "<fim_suffix>"),
    "mid": ("<|fim_middle|>", "<fim_middle>"),
    "rep": ("<|repo_name|>", "<repo_name>"),
    "sep": ("<|file_sep|>", "<file_sep>"),
}
#: llama-server's batch, which bounds the prefix (3/4 of it) and the suffix (the rest).
INFILL_BATCH = 2048
#: What llama-server writes before each extra chunk when the model has no file separator.
CHUNK_SEPARATOR = "\n\n--- snippet ---\n\n"
#: The project name and the current file's name llama-server writes in the repository layout.
REPO_NAME, FILE_NAME = "myproject", "filename"


@dataclass(frozen=True)
class FimTokens:
    """A model's FIM token ids: prefix, suffix and middle, and the repository-level ``rep``
    (``<|repo_name|>``) and ``sep`` (``<|file_sep|>``) where it has them; ``bos`` is the
    beginning-of-sequence token when the model's prompts start with one (else empty)."""

    pre: int
    suf: int
    mid: int
    rep: int | None = None
    sep: int | None = None
    bos: tuple[int, ...] = ()


def fim_tokens(tokenizer: Tokenizer) -> FimTokens | None:
    """The model's FIM tokens, or None when it lacks a prefix, suffix or middle token: from the
    tokenizer where it says (llama.cpp's, which found them by their text), else looked up by
    their :data:`SPELLINGS`."""
    found = tokenizer.fim_tokens() if hasattr(tokenizer, "fim_tokens") else by_text(tokenizer)
    if not {"pre", "suf", "mid"} <= found.keys():
        return None
    with_bos = tokenizer.encode("a", add_special_tokens=True)
    plain = tokenizer.encode("a", add_special_tokens=False)
    bos = tuple(with_bos[:1]) if with_bos[:1] != plain[:1] else ()
    return FimTokens(
        found["pre"], found["suf"], found["mid"], found.get("rep"), found.get("sep"), bos
    )


def by_text(tokenizer: Tokenizer) -> dict[str, int]:
    """The FIM tokens among :data:`SPELLINGS` that are one special token of the vocabulary: a
    spelling that encodes to one id with special-token text parsed, and to something else as
    plain text."""
    found = {}
    for name, spellings in SPELLINGS.items():
        for text in spellings:
            ids = tokenizer.encode(text, add_special_tokens=False)
            if len(ids) == 1 and encode_literally(tokenizer, text) != ids:
                found[name] = ids[0]
                break
    return found


def encode_fim(
    tokenizer: Tokenizer, tokens: FimTokens, prefix: str | Sequence[int], suffix: str
) -> list[int]:
    """``[BOS]<PRE>prefix<SUF>suffix<MID>``: the prefix as text or token ids."""
    before = encode_literally(tokenizer, prefix) if isinstance(prefix, str) else list(prefix)
    after = encode_literally(tokenizer, suffix)
    return [*tokens.bos, tokens.pre, *before, tokens.suf, *after, tokens.mid]


def encode_infill(
    tokenizer: Tokenizer,
    tokens: FimTokens,
    prefix: str,
    suffix: str,
    extra: Sequence[tuple[str, str]],
    prompt: str,
    *,
    context: int,
    max_tokens: int,
) -> tuple[list[int], bool]:
    """llama-server's ``/infill`` prompt, and whether any part of it was cut.

    ``extra`` is (filename, text) chunks, written as ``<|repo_name|>myproject\\n`` then
    ``<|file_sep|>filename\\ntext`` each and ``<|file_sep|>filename\\n`` for the current file
    where the model has those tokens (each chunk after a plain-text separator otherwise). Then
    ``[BOS]<PRE>`` the prefix's last tokens, up to 3/4 of llama-server's batch (2048, or the
    ``context`` window if smaller), the ``prompt``, ``<SUF>`` the suffix's first tokens, up to
    the rest of the batch less the prompt and two, and ``<MID>``. The extra context fills what
    the window leaves after that and ``max_tokens``, its last tokens kept (llama-server leaves
    room for its own default token limit instead)."""
    typed = tokenizer.encode(prompt, add_special_tokens=False) if prompt else []
    before, after = encode_literally(tokenizer, prefix), encode_literally(tokenizer, suffix)
    batch = min(INFILL_BATCH, context)
    keep_before = min(len(before), 3 * (batch // 4))
    keep_after = min(len(after), max(0, batch // 4 - (2 + len(typed))))
    middle = [
        *tokens.bos, tokens.pre, *before[len(before) - keep_before :], *typed,
        tokens.suf, *after[:keep_after], tokens.mid,
    ]  # fmt: skip
    chunks = extra_context(tokenizer, tokens, extra)
    keep_chunks = min(len(chunks), max(0, context - len(middle) - max_tokens))
    cut = (keep_before, keep_after, keep_chunks) != (len(before), len(after), len(chunks))
    return chunks[len(chunks) - keep_chunks :] + middle, cut


def extra_context(
    tokenizer: Tokenizer, tokens: FimTokens, extra: Sequence[tuple[str, str]]
) -> list[int]:
    """The extra context's tokens, before the FIM prefix (see :func:`encode_infill`)."""
    ids: list[int] = []
    if tokens.rep is not None:
        ids += [tokens.rep, *encode_literally(tokenizer, REPO_NAME + "\n")]
    for filename, text in extra:
        if tokens.sep is not None:
            ids += [tokens.sep, *encode_literally(tokenizer, filename + "\n")]
        else:
            ids += encode_literally(tokenizer, CHUNK_SEPARATOR)
        ids += encode_literally(tokenizer, text)
    if tokens.sep is not None:
        ids += [tokens.sep, *encode_literally(tokenizer, FILE_NAME + "\n")]
    return ids
