"""A tiny GGUF target/draft pair with a chat template, written once per test session, for the
engine and server tests."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from tiny_gguf import TOKENS, perturbed, tiny_weights, write_gguf

#: Unknown, BOS, EOS, the word boundary and the 26 letters: text prompts tokenize letter by letter.
VOCABULARY = [*TOKENS[:4], *(chr(c) for c in range(ord("a"), ord("z") + 1))]
CONTEXT = 512
EOS = 2
#: Each message as its role's initial and its text, then "a " to open the assistant's turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'][0] }} {{ message['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}a {% endif %}"
)


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory) -> tuple[Path, Path]:
    """Target and a well-matched draft. The EOS row of the output layer is zero, so EOS is
    (almost) never the most likely token and generations run to their token limit."""
    folder = tmp_path_factory.mktemp("serving-gguf")
    target = tiny_weights(0, logit_scale=6.0, vocab=len(VOCABULARY))
    target["output.weight"][EOS] = 0.0
    draft = perturbed(target, 1, 0.05)
    options = {"context": CONTEXT, "chat_template": CHAT_TEMPLATE}
    return (
        write_gguf(folder / "target.gguf", target, VOCABULARY, **options),
        write_gguf(folder / "draft.gguf", draft, VOCABULARY, **options),
    )
