"""The engine on the tiny GGUF pair: one load, many generations; output equal to target-only
decoding; a warm request's rows bitwise those of a cold one; stop strings, cancellation, the
shared history, typed refusals; and under the coupled rule (the default) a request's speculative
output is its target-only output for the seed at any temperature."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from conftest import EOS

from spec_decode.constraints.formats import output_grammar
from spec_decode.core.errors import BadPrompt, BadRequest, ContextTooLong
from spec_decode.core.generate import generate_autoregressive
from spec_decode.core.processors import LogitBias
from spec_decode.core.sampling import SamplingParams
from spec_decode.serving.config import EngineConfig
from spec_decode.serving.engine import Engine
from spec_decode.serving.request import RequestOptions
from spec_decode.serving.text import IncrementalText


def run(
    engine: Engine, prompt, max_tokens: int, *, on_step=None, cancel=None, raw=False, **options
):
    """``engine`` generating for ``prompt`` with these options (the request prepared first)."""
    request = engine.prepare(prompt, RequestOptions(**options), max_tokens=max_tokens, raw=raw)
    return engine.generate(request, on_step=on_step, cancel=cancel)


GREEDY = SamplingParams(temperature=0)
WARM = SamplingParams(temperature=0.8)


@pytest.fixture(scope="module")
def engine(tiny_pair):
    target, draft = tiny_pair
    loaded = Engine.load(EngineConfig(target=str(target), draft=str(draft), threads=1))
    loaded.warm_up()
    return loaded


def recorded_rows(engine: Engine, monkeypatch) -> list[np.ndarray]:
    """Every probability row the target returns from now on, in order."""
    rows: list[np.ndarray] = []
    model = engine.target.model
    original = model._dists

    def recording(sequence: list[int], n_rows: int) -> np.ndarray:
        out = original(sequence, n_rows)
        rows.extend(out.copy())
        return out

    monkeypatch.setattr(model, "_dists", recording)
    return rows


def test_greedy_output_is_target_only_output(engine, cold):
    prompt = engine.encode_chat([{"role": "user", "content": "hello world"}])
    done = run(engine, prompt, 40, sampling=GREEDY)
    cold.forget()
    reference = generate_autoregressive(
        cold.target.model, prompt, 40, np.random.default_rng(0), sampling=GREEDY
    )
    assert done.tokens == reference.tokens and done.finish_reason == "length"
    assert done.prompt_tokens == len(prompt) and done.trace.target_passes <= 40


def test_a_warm_turn_computes_bitwise_the_rows_of_a_cold_one(engine, cold, monkeypatch):
    first = [{"role": "user", "content": "write the alphabet backwards please"}]
    prompt = engine.encode_chat(first)
    answer = run(engine, prompt, 24, sampling=WARM, seed=5)
    second = [*first, {"role": "assistant", "content": answer.text}]
    second.append({"role": "user", "content": "and now forwards"})
    prompt2 = engine.encode_chat(second)
    warm_rows = recorded_rows(engine, monkeypatch)
    warm = run(engine, prompt2, 24, sampling=WARM, seed=7)
    cold.forget()
    cold_rows = recorded_rows(cold, monkeypatch)
    reference = run(cold, prompt2, 24, sampling=WARM, seed=7)
    # the stock build reuses prompt rows only; the exact-rows build the answer's rows as well
    reusable = len(prompt) if engine.target.model.invariant_batch_size != 1 else len(prompt2)
    assert 0 < warm.cached_tokens <= reusable and reference.cached_tokens == 0
    assert warm.tokens == reference.tokens
    assert len(warm_rows) == len(cold_rows)
    assert all(np.array_equal(a, b) for a, b in zip(warm_rows, cold_rows, strict=True))


def test_reuse_keeps_only_whole_tiles_of_batch_invariant_calls(engine, monkeypatch):
    model = engine.target.model
    monkeypatch.setattr(model, "invariant_batch_size", 8)
    model.reset()
    prompt = list(range(4, 24))  # 20 tokens read in one call: two whole tiles of 8, and 4 more
    model.next_dist(prompt)
    for n in range(1, 6):  # five generated tokens, fed one at a time
        model.next_dist(prompt + [5] * n)
    assert model.keep_reusable(prompt + [5] * 5 + list(range(4, 20))) == 16
    model.next_dist(prompt + [6] * 3)  # 7 tokens read in one call: no whole tile
    assert model.keep_reusable(prompt + [6] * 3) == 8  # a multiple of 8, and 8+ left to read
    model.reset()
    model.next_dist(prompt[:6])  # a call of 6 rows: not batch-invariant with longer calls
    assert model.keep_reusable(prompt) == 0 and model.cached_tokens == []
    monkeypatch.setattr(model, "invariant_batch_size", None)  # a build nobody measured
    model.next_dist(prompt)
    assert model.keep_reusable(prompt + [5] * 10) == 0


def test_stop_strings_cut_the_text_and_end_the_generation(engine):
    prompt = engine.encode("abc", raw=True)
    full = run(engine, prompt, 30, sampling=GREEDY)
    stop = full.text[5:8]
    pieces: list[str] = []
    done = run(
        engine,
        prompt,
        30,
        sampling=GREEDY,
        stop=[stop],
        on_step=lambda piece: pieces.append(piece.text),
    )
    assert done.finish_reason == "stop"
    assert done.text == full.text[: full.text.index(stop)] == "".join(pieces)
    assert done.tokens == full.tokens[: len(done.tokens)] and len(done.tokens) < 30


@pytest.mark.parametrize("sampling", [GREEDY, WARM], ids=["greedy", "T=0.8"])
def test_ignore_eos_decodes_past_the_end_exactly(fixed, sampling):
    """Drafting 3 tokens every step (the auto policy drafts only where this machine's measured
    curve says it pays), past the end and up to it alike."""
    engine = fixed
    prompt = engine.encode("xyz", raw=True)
    ending = LogitBias({EOS: 8.0})  # the tiny model never ends by itself: make it likely
    options = {"sampling": sampling, "seed": 3, "logit_bias": ending}
    ended = run(engine, prompt, 30, **options)
    assert ended.finish_reason == "stop" and ended.tokens[-1] == EOS and len(ended.tokens) < 30
    request = engine.prepare(prompt, RequestOptions(**options, ignore_eos=True), max_tokens=30)
    past = engine.generate(request)
    plain = engine.generate(request.target_only())
    assert past.finish_reason == "length" and len(past.tokens) == 30
    assert past.tokens[: len(ended.tokens)] == ended.tokens  # the same answer, and more of it
    assert past.tokens == plain.tokens  # speculation stays exact past the end
    assert past.trace.proposed > 0


def test_ignore_eos_is_refused_beside_a_grammar():
    grammar = output_grammar(answer={"type": "object"})
    with pytest.raises(BadRequest, match="ignore_eos") as refused:
        RequestOptions(grammar=grammar, ignore_eos=True)
    assert refused.value.param == "ignore_eos"


def test_cancellation_stops_within_a_step_and_leaves_no_trace(engine, cold):
    prompt = engine.encode("abcabc", raw=True)
    cancel = threading.Event()
    steps: list[list[int]] = []

    def on_step(piece) -> None:
        steps.append(piece.tokens)
        if len(steps) == 2:
            cancel.set()

    done = run(engine, prompt, 100, sampling=GREEDY, on_step=on_step, cancel=cancel)
    assert done.finish_reason == "cancelled" and done.trace.target_passes == 2
    after = run(engine, prompt, 20, sampling=WARM, seed=3)
    cold.forget()
    assert after.tokens == run(cold, prompt, 20, sampling=WARM, seed=3).tokens


def test_the_history_grows_by_finished_requests(engine):
    before = engine.history.version
    run(engine, engine.encode("xyz", raw=True), 5, sampling=GREEDY)
    assert engine.history.version == before + 1


def test_bad_requests_are_typed_value_errors_naming_the_field(engine):
    cases = [
        (lambda: run(engine, [], 5), BadPrompt, "prompt", "prompt is empty"),
        (lambda: run(engine, "", 5, raw=True), BadPrompt, "prompt", "prompt is empty"),
        (lambda: run(engine, [4, 5], engine.context_window), ContextTooLong, "prompt", "window"),
        (lambda: run(engine, [4, 10_000], 5), BadPrompt, "prompt", "token ids"),
        (lambda: run(engine, [4, 0.5], 5), BadPrompt, "prompt", "whole number"),
        (lambda: run(engine, [4, 5], 0), BadRequest, "max_tokens", ">= 1"),
        (
            lambda: engine.prepare([4, 5], max_tokens=9, limit=8),
            BadRequest,
            "max_tokens",
            "limit of 8",
        ),
        (lambda: run(engine, [4, 5], 5, stop=[""]), BadRequest, "stop", "stop strings"),
        (lambda: run(engine, [4, 5], 5, rule="typical"), BadRequest, "rule", "coupled"),
    ]
    for call, kind, param, words in cases:
        with pytest.raises(kind, match=words) as caught:
            call()
        assert isinstance(caught.value, ValueError) and caught.value.param == param
    assert caught.value.code is None
    with pytest.raises(ContextTooLong) as caught:
        run(engine, [4, 5], engine.context_window)
    assert caught.value.code == "context_length_exceeded"


def test_without_max_tokens_a_request_gets_the_rest_of_the_window_up_to_the_limit(engine):
    assert engine.prepare([4, 5]).max_tokens == engine.context_window - 2
    assert engine.prepare([4, 5], limit=7).max_tokens == 7


class Letters:
    """A tokenizer whose tokens are byte strings, to split characters between tokens."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return b"".join(self.pieces[i] for i in ids).decode("utf-8", "replace")


def test_text_holds_back_split_characters_and_possible_stop_strings():
    tokenizer = Letters([b"ab", b"\xc3", b"\xa9", b"cd", b"e", b"X", b"Y"])
    text = IncrementalText(tokenizer, stop=["XY"])
    assert text.add([0]) == "ab"
    assert text.add([1]) == ""  # half of é: held back
    assert text.add([2]) == "\u00e9"
    assert text.add([3, 4]) == "cde"
    assert text.add([5]) == ""  # "X" may begin the stop string
    assert text.add([6]) == "" and text.stopped and text.text == "ab\u00e9cde"
    assert text.finish() == ""
    partial = IncrementalText(tokenizer, stop=["XY"])
    assert partial.add([0, 5]) == "ab" and partial.finish() == "X"  # no stop after all


@pytest.fixture(scope="module")
def fixed(tiny_pair):
    target, draft = tiny_pair
    config = EngineConfig(target=str(target), draft=str(draft), threads=1, policy="fixed", k=3)
    return Engine.load(config)


def test_coupled_requests_equal_target_only_for_each_seed(fixed):
    prompt = fixed.encode("abcab", raw=True)
    sampling = SamplingParams(0.7)
    for seed in range(4):
        fixed.forget()
        spec = run(fixed, prompt, 16, sampling=sampling, seed=seed)
        fixed.forget()
        plain = run(fixed, prompt, 16, sampling=sampling, seed=seed, target_only=True)
        assert spec.tokens == plain.tokens
        assert spec.trace.accepted > 0


def test_an_unknown_rule_is_refused_before_loading():
    with pytest.raises(ValueError, match="coupled, standard"):
        EngineConfig(rule="typical")
