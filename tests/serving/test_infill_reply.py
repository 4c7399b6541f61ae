"""The parts of ``/infill`` that need no model: llama-server's ``n_indent`` and
``t_max_predict_ms`` stops, ``response_fields``, and its seed of -1 (:mod:`test_fim` serves
them on tiny GGUF models)."""

from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("sse_starlette")

from spec_decode.serving.completion import Piece
from spec_decode.serving.infill import InfillRequest
from spec_decode.serving.infill_reply import Limits, indent_end, pick
from spec_decode.serving.schemas import parse

BODY = {"input_prefix": "def f():\n    ", "input_suffix": "\n"}


def chars(ids, skip_special_tokens=True) -> str:
    """A decoder whose tokens are characters."""
    return "".join(map(chr, ids))


def piece(text: str) -> Piece:
    return Piece([ord(c) for c in text], text)


def test_n_indent_ends_at_a_line_indented_less():
    assert indent_end("x\n    y\n  z", 4) == 10  # after the 2 spaces of the third line
    assert indent_end("x\n    y\n    z", 4) is None
    assert indent_end("x\n  ", 4) is None  # nothing after the indentation yet
    assert indent_end("x\n\n    y", 4) == 2  # a blank line ends it too
    assert indent_end("  x", 4) is None  # the first line is the cursor's own
    limits = Limits(4, 0, threading.Event(), chars)
    out = [limits.take(piece(text)) for text in ("ab\n    c", "d\n  e", "fg")]
    assert [p.text for p in out] == ["ab\n    c", "d\n  ", ""] and limits.text == "ab\n    cd\n  "
    # the tokens up to the one that wrote the "e" that ended it, as llama-server counts them
    assert chars(out[1].tokens) == "d\n  e" and out[2].tokens == [] and limits.kept == 13
    assert limits.cut and limits.cancel.is_set()


def test_t_max_predict_ms_ends_at_the_next_line_break():
    limits = Limits(0, 1, threading.Event(), chars)
    assert limits.take(piece("a\nb")).text == "a\nb"  # the first step starts the clock
    time.sleep(0.01)
    assert limits.take(piece("c")).text == "c"  # time is up: the next line break ends it
    last = limits.take(piece("d\ne\nf"))
    assert (last.text, chars(last.tokens)) == ("d\n", "d\n") and limits.cancel.is_set()


def test_llama_servers_seed_of_minus_1_draws_a_fresh_one():
    body = parse(InfillRequest, BODY | {"seed": -1, "return_token_ids": True})
    assert body.seed is None and body.wants_tokens()
    assert parse(InfillRequest, BODY | {"seed": 3}).seed == 3


def test_response_fields_keep_what_they_name():
    answer = {"content": "x", "timings": {"prompt_n": 3}, "stop": True}
    assert pick(["content", "timings/prompt_n", "timings/nothing"], answer) == {
        "content": "x", "timings/prompt_n": 3
    }  # fmt: skip
    assert pick([], answer) == answer
