"""A draft is used only where it fits the target: the default draft beside a target of another
vocabulary is set aside with a note and the engine drafts from the prompt; a draft the user named
is refused (``ValueError``: the CLI's exit 2)."""

from __future__ import annotations

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from spec_decode.serving.config import LOOKUP, EngineConfig
from spec_decode.serving.engine import Engine


def config(tiny_pair, json_pair, named: bool) -> EngineConfig:
    target, _ = tiny_pair
    _, other = json_pair  # another vocabulary
    return EngineConfig(
        target=str(target), draft=str(other), threads=1, policy="fixed", k=3, draft_named=named
    )


def test_an_unnamed_draft_of_another_vocabulary_is_set_aside(tiny_pair, json_pair):
    engine = Engine.load(config(tiny_pair, json_pair, named=False))
    try:
        assert engine.draft is None and engine.config.draft == LOOKUP
        assert len(engine.notes) == 1 and "vocabularies differ" in engine.notes[0]
        completion = engine.generate(engine.prepare("ab", max_tokens=8, raw=True))
        assert len(completion.tokens) == 8
    finally:
        engine.close()


def test_a_named_draft_of_another_vocabulary_is_refused(tiny_pair, json_pair):
    with pytest.raises(ValueError, match="vocabularies differ"):
        Engine.load(config(tiny_pair, json_pair, named=True))
