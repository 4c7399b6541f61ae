"""Several clients at once (``serve --parallel``): every answer is the same request's answer
from a server that runs one request at a time, greedy and seeded at T = 0.7, while the requests
share target decodes (a request's first text while another streams is the concurrent
benchmark's figure, ``bench/serving/concurrent_users.py``: on the tiny pair a 440-token answer ends
within milliseconds, too soon to time against).

Runs ``spec-decode serve`` as a subprocess on the tiny pair (float32 weights: covered by the
exact-rows build, so its slots share calls) with the official ``openai`` client.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

pytest.importorskip("openai")
pytest.importorskip("llama_cpp")

from exact_rows_mark import needs_exact_rows
from servers import MODEL, Server

pytestmark = [
    pytest.mark.slow,
    needs_exact_rows("slots share calls only on the exact-rows build"),
]

#: (prompt, temperature, seed): greedy and seeded requests of several lengths.
REQUESTS = [
    ("ab", 0.0, None),
    ("ba ab", 0.7, 1),
    ("aab", 0.0, None),
    ("b", 0.7, 2),
    ("abab ba", 0.7, 3),
    ("bb a", 0.0, None),
    ("a", 0.7, 4),
    ("ba", 0.7, 5),
]


def ask(server: Server, prompt: str, temperature: float, seed: int | None) -> str:
    """A streamed chat request's text."""
    stream = server.client().chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": prompt}],
        max_tokens=40,
        temperature=temperature,
        seed=seed,
        stream=True,
    )
    return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)


def shared_decodes(server: Server) -> float:
    text = httpx.get(f"{server.url}/metrics").text
    return float(re.search(r"^spec_decode_shared_decodes (\S+)$", text, re.M).group(1))


@pytest.fixture(scope="module")
def solo_answers(tiny_pair) -> list[str]:
    server = Server(tiny_pair, "--parallel", "1")
    try:
        return [ask(server, *request) for request in REQUESTS]
    finally:
        server.stop()


def test_concurrent_answers_are_solo_answers(tiny_pair, solo_answers):
    server = Server(tiny_pair, "--parallel", "4")
    try:
        assert "(4 at once)" in "".join(server.lines)
        for _ in range(2):  # two rounds: the second finds warm slots and a history
            with ThreadPoolExecutor(len(REQUESTS)) as pool:
                answers = list(pool.map(lambda r: ask(server, *r), REQUESTS))
            assert answers == solo_answers
        assert shared_decodes(server) > 0
    finally:
        assert server.stop() == 0
