"""``spec-decode generate``'s summary: its table fits an 80-column terminal without Rich cutting
a header or a row label, and it says why a draft model was not loaded only where that is why."""

from __future__ import annotations

import io

from rich.console import Console

from spec_decode.cli import generate
from spec_decode.core.trace import Trace
from spec_decode.serving.completion import Completion


def test_the_summary_fits_80_columns_whole(monkeypatch):
    trace = Trace(tokens=list(range(128)), drafted_lengths=[15] * 8, accepted_lengths=[15] * 8)
    run = Completion(trace.tokens, "x", "length", 1234, 0, trace, 12.345)
    payload = {
        "backend": "llama.cpp", "tree": None, "k": 63, "prompt_tokens": 1234,
        "draft": "qwen2.5-coder-0.5b", "drafting": "qwen2.5-coder-0.5b", "policy": "auto",
        "draft_loaded": False,
        "speedup": 1.52, "identical_tokens": True,
    }  # fmt: skip
    text = printed(monkeypatch, payload, {"speculative": run, "target-only": run})
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= 80
    for header in ("run", "tokens", "tok/s", "passes", "accepted", "tok/pass", "wall s"):
        assert header in text
    assert "speculative" in text and "target-only" in text


def printed(monkeypatch, payload: dict, runs: dict[str, Completion]) -> str:
    """What the summary prints for ``payload`` and ``runs`` on an 80-column terminal."""
    out = io.StringIO()
    monkeypatch.setattr(generate, "console", Console(file=out, width=80, color_system=None))
    generate._print_summary(payload, runs)
    return out.getvalue()


def summary(monkeypatch, **payload) -> str:
    trace = Trace(tokens=list(range(8)))
    run = Completion(trace.tokens, "x", "length", 10, 0, trace, 1.0)
    payload = {"backend": "llama.cpp", "tree": None, "k": 63, "prompt_tokens": 10} | payload
    return printed(monkeypatch, payload, {"speculative": run})


def test_a_draft_set_aside_is_not_called_unable_to_pay(monkeypatch):
    """Beside a target of another family the default draft is set aside (drafting from the
    prompt, said in the load notes): the summary must not add that it could not pay."""
    reason = "cannot pay even"
    asked = {"draft": "qwen2.5-coder-0.5b", "policy": "auto", "draft_loaded": False}
    assert reason in summary(monkeypatch, **asked, drafting="qwen2.5-coder-0.5b")
    assert reason not in summary(monkeypatch, **asked, drafting="lookup")
