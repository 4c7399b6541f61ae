"""Editors at once on a server with slots: llama.vim's and llama.vscode's ``/infill`` and
Continue's completion with a ``suffix`` (:mod:`test_fim`'s request shapes and tiny FIM model),
sent together, each get the tokens they get alone while their rows share target calls."""

from __future__ import annotations

import asyncio

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("sse_starlette")
pytest.importorskip("prometheus_client")

from test_fim import (  # noqa: E402
    CONTINUE,
    LIMIT,
    LLAMA_VIM,
    LLAMA_VSCODE,
    MODEL,
    N,
    events,
    fim_pair,  # noqa: F401 (a fixture: pytest finds it in this module's names)
)

from spec_decode.serving.config import EngineConfig  # noqa: E402
from spec_decode.serving.engine import Engine  # noqa: E402
from spec_decode.serving.server import create_app  # noqa: E402
from spec_decode.serving.state import Settings  # noqa: E402
from spec_decode.serving.worker import Worker  # noqa: E402


def test_editors_at_once_get_the_answers_they_get_alone(fim_pair):  # noqa: F811 (imported)
    """llama.vim's and llama.vscode's ``/infill`` and Continue's streamed completion with a
    suffix, greedy and seeded, all sent at once to a server with 4 slots (their rows share
    target calls): each answer's tokens are those the same request gets alone."""
    target, _ = fim_pair
    config = EngineConfig(target=str(target), draft="lookup", threads=1, parallel=4)
    worker = Worker(lambda: Engine.load(config), max_queue=8)
    app = create_app(worker, Settings(MODEL, max_tokens=LIMIT))
    infill = {"return_tokens": True, "response_fields": None}
    completion = {"stop": [], "return_token_ids": True}
    greedy, seeded = {"temperature": 0.0}, {"temperature": 0.7, "seed": 5}
    requests = [  # the editors send no seed: a request without one samples anew each time
        ("/infill", LLAMA_VIM | infill | greedy),
        ("/infill", LLAMA_VSCODE | infill | seeded),
        ("/v1/completions", CONTINUE | completion | greedy),
        ("/v1/completions", CONTINUE | completion | seeded),
        ("/infill", LLAMA_VSCODE | infill | seeded | {"stream": True}),
    ]

    def tokens(path: str, response: httpx.Response) -> list[int]:
        assert response.status_code == 200, response.text
        if path == "/infill" and not response.text.startswith("data:"):
            return response.json()["tokens"]
        if path == "/infill":  # the last event is the whole answer's
            return [t for event in events(response)[:-1] for t in event["tokens"]]
        return [t for e in events(response) for t in e["choices"][0].get("token_ids", [])]

    async def alone_then_together():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            alone = [await client.post(path, json=body) for path, body in requests]
            shared = worker.engine.batchers[0].shared_steps
            together = await asyncio.gather(
                *(client.post(path, json=body) for path, body in requests)
            )
            return alone, together, worker.engine.batchers[0].shared_steps - shared

    try:
        alone, together, shared = asyncio.run(alone_then_together())
    finally:
        worker.close(0)
        worker.join()
    paths = [path for path, _ in requests]
    alone_tokens = [tokens(path, r) for path, r in zip(paths, alone, strict=True)]
    assert all(len(t) == N for t in alone_tokens), [len(t) for t in alone_tokens]
    assert [tokens(path, r) for path, r in zip(paths, together, strict=True)] == alone_tokens
    assert shared > 0, "the requests never shared a target call"
