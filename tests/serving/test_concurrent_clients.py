"""Eight clients at once on an engine with a Hugging Face tokenizer: requests are tokenized on the
clients' threads while the worker's thread decodes the running generation's text.

Hugging Face's Rust tokenizers raise ``RuntimeError: Already borrowed`` when a call enters one
while another thread is inside it (vLLM #40949). How often that happens depends on the version
and on timing, so the tokenizer here is the real one behind a check that raises exactly that
error whenever two calls overlap, each call held open a moment to make overlaps likely. With
the engine's serialized tokenizer every request succeeds and gets the answer it gets alone; the
same clients on an unserialized tokenizer (the broken variant) hit the error.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

pytest.importorskip("transformers")

import spec_decode.backends.prompts as prompts
from spec_decode.core.sampling import SamplingParams
from spec_decode.serving.config import EngineConfig
from spec_decode.serving.engine import Engine
from spec_decode.serving.request import RequestOptions
from spec_decode.serving.worker import Job, Worker

CLIENTS = 8
REQUESTS_EACH = 3
GREEDY = SamplingParams(temperature=0)
WORDS = ["def", "x", "(", "1", ")", ":", "return", "x", "+", "1"]
#: Eight different prompts in the tiny tokenizer's words, each with room for its answer in the
#: tiny model's 64 positions.
PROMPTS = [" ".join((WORDS[i:] + WORDS[:i]) * (1 + i % 3)) for i in range(CLIENTS)]


class BorrowChecked:
    """``tokenizer`` whose calls raise ``RuntimeError("Already borrowed")`` when they overlap,
    as a Rust tokenizer's may; each call stays inside for ``hold_s`` seconds."""

    def __init__(self, tokenizer: Any, hold_s: float = 0.002) -> None:
        self.wrapped, self.hold_s, self.inside = tokenizer, hold_s, False
        self.encode = self._checked(tokenizer.encode)
        self.decode = self._checked(tokenizer.decode)
        self.apply_chat_template = self._checked(tokenizer.apply_chat_template)

    def _checked(self, method):
        def call(*args, **kwargs):
            if self.inside:
                raise RuntimeError("Already borrowed")
            self.inside = True
            try:
                time.sleep(self.hold_s)
                return method(*args, **kwargs)
            finally:
                self.inside = False

        return call

    def __getattr__(self, name: str) -> Any:
        return getattr(self.wrapped, name)


def start_worker(folder) -> Worker:
    """A worker whose engine's tokenizer is the tiny folder's, borrow-checked."""
    config = EngineConfig(target=str(folder), draft="lookup", backend="transformers", threads=1)

    def load() -> Engine:
        engine = Engine.load(config)
        checked = dataclasses.replace(engine.target, tokenizer=BorrowChecked(engine.tokenizer))
        return dataclasses.replace(engine, target=checked)  # wraps the new tokenizer again

    return Worker(load, max_queue=CLIENTS * REQUESTS_EACH)


def client(worker: Worker, prompt: str, start: threading.Barrier) -> list[list[int]]:
    """One client's answers: each request tokenized here, then run (its text decoded on the
    worker's thread, step by step)."""
    start.wait()
    answers = []
    for _ in range(REQUESTS_EACH):
        request = worker.engine.prepare(
            prompt, RequestOptions(sampling=GREEDY), max_tokens=24, raw=True
        )
        answers.append(worker.submit(Job(request)).result(120).tokens)
    return answers


def run_clients(worker: Worker) -> dict[str, list[list[int]]]:
    start = threading.Barrier(CLIENTS)
    with ThreadPoolExecutor(CLIENTS) as pool:
        futures = {prompt: pool.submit(client, worker, prompt, start) for prompt in PROMPTS}
        return {prompt: future.result(600) for prompt, future in futures.items()}


@pytest.fixture(scope="module")
def folder(tmp_path_factory, tiny_qwen2_folder):
    return tiny_qwen2_folder(tmp_path_factory.mktemp("hf") / "target", seed=0)


def test_eight_concurrent_clients_get_their_answers_without_a_tokenizer_error(folder):
    worker = start_worker(folder)
    try:
        alone = {}
        for prompt in PROMPTS:
            request = worker.engine.prepare(
                prompt, RequestOptions(sampling=GREEDY), max_tokens=24, raw=True
            )
            alone[prompt] = worker.submit(Job(request)).result(120).tokens
        answers = run_clients(worker)
    finally:
        worker.close(0)
        worker.join()
    for prompt in PROMPTS:
        assert answers[prompt] == [alone[prompt]] * REQUESTS_EACH


def test_the_same_clients_on_an_unserialized_tokenizer_hit_the_error(folder, monkeypatch):
    monkeypatch.setattr(prompts.SerializedTokenizer, "_serialized", lambda self, method: method)
    worker = start_worker(folder)
    try:
        with pytest.raises(RuntimeError, match="Already borrowed"):
            run_clients(worker)
    finally:
        worker.close(0)
        worker.join()
