"""A draft is used only where it fits the target: the default draft beside a target of another
vocabulary is set aside with a note and the engine drafts from the prompt; a draft the user named
is refused (``ValueError``: the CLI's exit 2). Under the auto policy a draft too dear to pay on
this machine is set aside too.
"""

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


@pytest.mark.parametrize("draft_seconds, kept", [(0.5, False), (1e-6, True)])
def test_a_draft_measured_too_dear_to_pay_is_set_aside(tiny_pair, monkeypatch, draft_seconds, kept):
    """Under the auto policy a draft loaded because its cached cost was unknown (or not
    believed) is timed; where no block it could draft pays on the curve, it is closed, its
    options never planned (``generate`` says so, as where it was never loaded)."""
    from spec_decode.drafting.costs import CostCurve
    from spec_decode.serving import loader

    curve = CostCurve.from_passes([0.01 * (1 + 0.1 * n) for n in range(64)])
    monkeypatch.setattr(loader, "cost_curve", lambda backend, model: curve)
    monkeypatch.setattr(loader, "draft_may_pay", lambda *args: True)
    monkeypatch.setattr(loader, "pass_seconds", lambda *a, **kw: ([draft_seconds], False))
    target, draft = tiny_pair
    engine = Engine.load(EngineConfig(target=str(target), draft=str(draft), threads=1))
    try:
        assert (engine.draft is not None) is kept
        completion = engine.generate(engine.prepare("ab", max_tokens=8, raw=True))
        assert len(completion.tokens) == 8
    finally:
        engine.close()
