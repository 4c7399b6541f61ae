"""A tiny GGUF target/draft pair with a chat template, written once per test session, for the
engine and server tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from spec_decode.certify.tiny_gguf import TOKENS, perturbed, tiny_weights, write_gguf
from spec_decode.serving.config import EngineConfig
from spec_decode.serving.engine import Engine
from spec_decode.serving.worker import Worker

#: Unknown, BOS, EOS, the word boundary and the 26 letters: text prompts tokenize letter by letter.
VOCABULARY = [*TOKENS[:4], *(chr(c) for c in range(ord("a"), ord("z") + 1))]
CONTEXT = 512
EOS = 2
#: Each message as its role's initial and its text, then "a " to open the assistant's turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'][0] }} {{ message['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}a {% endif %}"
)


def write_pair(
    folder: Path, vocabulary: list[str], seed: int, context: int = CONTEXT
) -> tuple[Path, Path]:
    """Target and a well-matched draft over ``vocabulary``, with the chat template and a window
    of ``context`` tokens. The EOS row of the output layer is zero, so EOS is (almost) never the
    most likely token and generations run to their token limit."""
    target = tiny_weights(seed, logit_scale=6.0, vocab=len(vocabulary))
    target["output.weight"][EOS] = 0.0
    draft = perturbed(target, seed + 1, 0.05)
    options = {"context": context, "chat_template": CHAT_TEMPLATE}
    return (
        write_gguf(folder / "target.gguf", target, vocabulary, **options),
        write_gguf(folder / "draft.gguf", draft, vocabulary, **options),
    )


@contextlib.contextmanager
def running(config: EngineConfig, max_queue: int) -> Iterator[Worker]:
    """A worker running ``config``'s engine, closed (its running jobs cancelled) afterwards."""
    worker = Worker(lambda: Engine.load(config), max_queue=max_queue)
    try:
        yield worker
    finally:
        worker.close(0)
        worker.join()


@pytest.fixture(scope="session")
def tiny_pair(tmp_path_factory) -> tuple[Path, Path]:
    """The engine and server tests' pair (:func:`write_pair`)."""
    return write_pair(tmp_path_factory.mktemp("serving-gguf"), VOCABULARY, seed=0)


@pytest.fixture(scope="module")
def cold(tiny_pair) -> Engine:
    """An engine over the tiny pair with no shared history, forgotten before every use: the
    reference for reuse."""
    target, draft = tiny_pair
    config = EngineConfig(target=str(target), draft=str(draft), threads=1, shared_history=False)
    return Engine.load(config)


#: Both cases of the letters, JSON's punctuation, digits and a newline, then the 256 byte
#: tokens a SentencePiece vocabulary falls back to: any text tokenizes, and JSON and tool calls
#: are written from the first tokens.
JSON_VOCABULARY = [
    *VOCABULARY,
    *(chr(c) for c in range(ord("A"), ord("Z") + 1)),
    *'{}":,<>_/[]',
    *"0123456789",
    "\n",
    *(f"<0x{byte:02X}>" for byte in range(256)),
]


@pytest.fixture(scope="session")
def json_pair(tmp_path_factory) -> tuple[Path, Path]:
    """A pair (:func:`write_pair`) over :data:`JSON_VOCABULARY`, for constrained output."""
    return write_pair(tmp_path_factory.mktemp("json-gguf"), JSON_VOCABULARY, seed=2)


@pytest.fixture(scope="session")
def no_whitespace() -> dict[str, float]:
    """A logit bias (as JSON sends it) that keeps the random tiny model from writing whitespace:
    it would indent every gap of a JSON answer to the grammar's bound and reach its token limit."""
    spaces = ["\u2581", "\n", "<0x20>", "<0x0A>", "<0x0D>", "<0x09>"]  # the boundary is U+2581
    return {str(JSON_VOCABULARY.index(token)): -100.0 for token in spaces}
