"""A transformers folder's tokenizer, and the check that a draft shares the target's."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from spec_decode.backends.transformers.model import TransformersModel
from spec_decode.backends.transformers.weights import existing_folder


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """Load the tokenizer saved in a local transformers folder."""
    return AutoTokenizer.from_pretrained(str(existing_folder(path)))


def check_pair(
    target: TransformersModel,
    draft: TransformersModel,
    target_tok: PreTrainedTokenizerBase | None = None,
    draft_tok: PreTrainedTokenizerBase | None = None,
) -> None:
    """Raise ``ValueError`` unless draft and target share a vocabulary (and tokenizer, if given).

    Speculative decoding compares distributions over the same token ids, so the output sizes
    must match and the tokenizers must map every string to the same ids.
    """
    if target.vocab_size != draft.vocab_size:
        raise ValueError(
            f"draft and target vocabularies differ: {draft.vocab_size} vs "
            f"{target.vocab_size} logits"
        )
    if target_tok is None or draft_tok is None:
        return
    if target_tok.get_vocab() != draft_tok.get_vocab():
        raise ValueError("draft and target tokenizers differ: their token-to-id maps are not equal")
    if target_tok.all_special_ids != draft_tok.all_special_ids:
        raise ValueError("draft and target tokenizers differ in their special tokens")
