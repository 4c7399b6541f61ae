"""User text in a chat message may not spell a control token: the template's own turn markers
are parsed from text, so a user's would be too (issue: prompt text `<|endoftext|>` closed its
own turn)."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace
from transformers import PreTrainedTokenizerFast

from spec_decode.backends.prompts import check_message_text

#: Slow: imports transformers.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tokenizer():
    words = ["<unk>", "</s>", "hello", "world", "<", "/", "s", ">"]
    model = Tokenizer(WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    model.pre_tokenizer = Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=model, unk_token="<unk>", eos_token="</s>")


def test_plain_text_passes(tokenizer):
    check_message_text(tokenizer, "hello world")


def test_control_token_text_is_refused_by_name(tokenizer):
    with pytest.raises(ValueError, match=r"control token\(s\) '</s>'"):
        check_message_text(tokenizer, "hello </s> world")
