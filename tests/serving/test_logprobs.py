"""Log-probabilities under speculation are target-only decoding's, bitwise: the certificate for
``logprobs``. On the tiny GGUF pair, a speculative request (the auto policy, and a fixed k = 3
chain that drafts with the draft model) reports for every token exactly the log-probability that
target-only decoding of the same request reports, and that the target's one-token distribution
at that position gives; greedy and sampled (coupled rule, seeded). A recorder that keeps the
first row it saw at a position (a row computed after a draft that was then rejected) fails.
Through the API, each token has its entry, whole and streamed."""

from __future__ import annotations

import asyncio
import json
import math

import numpy as np
import pytest

from spec_decode.core.sampling import SamplingParams
from spec_decode.serving import logprobs as logprobs_module
from spec_decode.serving.config import EngineConfig
from spec_decode.serving.engine import Engine
from spec_decode.serving.request import RequestOptions

PROMPT = [4, 5, 6, 7, 4, 5, 6, 7, 4, 5]
CONTROLS = {"greedy": (SamplingParams(0.0), None), "sampled": (SamplingParams(0.8), 11)}


@pytest.fixture(scope="module")
def engines(tiny_pair):
    target, draft = tiny_pair
    auto = Engine.load(EngineConfig(target=str(target), draft=str(draft), threads=1))
    fixed = Engine.load(
        EngineConfig(target=str(target), draft=str(draft), threads=1, policy="fixed", k=3)
    )
    return {"auto": auto, "fixed k = 3": fixed}


def run(engine: Engine, controls: str, top: int, target_only: bool = False):
    sampling, seed = CONTROLS[controls]
    engine.forget()
    request = engine.prepare(
        PROMPT,
        RequestOptions(sampling=sampling, seed=seed, logprobs=top, target_only=target_only),
        max_tokens=40,
    )
    return engine.generate(request)


def one_token_logprobs(engine: Engine, tokens: list[int]) -> list[float]:
    """log p(token) from the target's distribution after each prefix, one token at a time."""
    engine.forget()
    model = engine.target.model
    return [float(np.log(model.next_dist(PROMPT + tokens[:i])[t])) for i, t in enumerate(tokens)]


@pytest.mark.parametrize("controls", CONTROLS)
@pytest.mark.parametrize("name", ["auto", "fixed k = 3"])
def test_speculative_logprobs_are_target_only_logprobs(engines, name, controls):
    engine = engines[name]
    spec = run(engine, controls, top=3)
    plain = run(engine, controls, top=3, target_only=True)
    assert spec.tokens == plain.tokens and spec.trace.accepted > 0
    assert spec.logprobs == plain.logprobs  # bitwise, alternatives included
    assert [e.token for e in spec.logprobs] == spec.tokens
    assert [e.logprob for e in spec.logprobs] == one_token_logprobs(engine, spec.tokens)
    for entry in spec.logprobs:
        values = [lp for _, lp in entry.top]
        assert len(entry.top) == 3 and values == sorted(values, reverse=True)
        assert entry.logprob <= values[0]


def test_a_recorder_that_keeps_rows_of_rejected_paths_fails(engines, monkeypatch):
    def keeping_score(self, prefix, tokens):
        rows = logprobs_module.score(self.model, prefix, tokens)
        for i, row in enumerate(rows):
            self._rows.setdefault(len(prefix) + i, row)  # broken: the first row stays
        return rows

    def keeping_take(self, first, tokens):
        return [self._entry(self._rows[first + i], int(t)) for i, t in enumerate(tokens)]

    monkeypatch.setattr(logprobs_module.RowRecorder, "score", keeping_score)
    monkeypatch.setattr(logprobs_module.RowRecorder, "take", keeping_take)
    engine = engines["fixed k = 3"]
    spec = run(engine, "sampled", top=0)
    assert spec.trace.proposed > spec.trace.accepted  # some drafts were rejected
    assert [e.logprob for e in spec.logprobs] != one_token_logprobs(engine, spec.tokens)


def test_without_logprobs_a_request_reports_none_and_its_tokens_are_the_same(engines):
    engine = engines["auto"]
    engine.forget()
    request = engine.prepare(PROMPT, RequestOptions(sampling=SamplingParams(0.0)), max_tokens=40)
    done = engine.generate(request)
    assert done.logprobs is None and done.tokens == run(engine, "greedy", top=0).tokens


def test_the_api_gives_every_token_its_entry_whole_and_streamed(tiny_pair):
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    from spec_decode.serving.server import create_app
    from spec_decode.serving.state import Settings
    from spec_decode.serving.worker import Worker

    target, draft = tiny_pair
    config = EngineConfig(target=str(target), draft=str(draft), threads=1)
    worker = Worker(lambda: Engine.load(config), max_queue=2)
    app = create_app(worker, Settings("target"))
    chat = {"model": "target", "messages": [{"role": "user", "content": "abcabc"}]}
    chat |= {"max_tokens": 12, "temperature": 0, "logprobs": True, "top_logprobs": 2}
    text = {"model": "target", "prompt": "abcab", "max_tokens": 12, "temperature": 0}
    text |= {"logprobs": 2}

    async def ask():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            whole = (await client.post("/v1/chat/completions", json=chat)).json()
            streamed = await client.post("/v1/chat/completions", json=chat | {"stream": True})
            completion = (await client.post("/v1/completions", json=text)).json()
            return whole, streamed.text, completion

    try:
        whole, streamed, completion = asyncio.run(ask())
    finally:
        worker.close(0)
        worker.join()
    entries = whole["choices"][0]["logprobs"]["content"]
    assert len(entries) == whole["usage"]["completion_tokens"] == 12
    assert all(len(e["top_logprobs"]) == 2 and e["logprob"] <= 0 for e in entries)
    assert "".join(e["token"] for e in entries) == whole["choices"][0]["message"]["content"]
    events = [json.loads(line[5:]) for line in streamed.splitlines() if line.startswith("data:")
              and "[DONE]" not in line]  # fmt: skip
    chunked = [e for ev in events for e in (ev["choices"][0]["logprobs"] or {}).get("content", [])]
    assert chunked == entries
    listed = completion["choices"][0]["logprobs"]
    assert len(listed["tokens"]) == len(listed["token_logprobs"]) == 12
    assert all(len(top) == 2 for top in listed["top_logprobs"])
    assert all(math.isfinite(lp) for lp in listed["token_logprobs"])
