"""Several sequences of one llama.cpp context decoded together: the server's slots.

Each slot is a :class:`~.model.LlamaCppModel` on a sequence of its own of a shared
:class:`~.context.LlamaContext` (cells of its own), driven by a request on a thread of its own.
When a slot needs rows it posts them (:meth:`Batcher.decode`) and waits. One thread runs
:meth:`Batcher.step` over and over (llama.cpp keeps a team of OpenMP threads for each calling
thread, so every decode comes from one): each step feeds what the slots have posted in ONE
``llama_decode`` of at most :attr:`Batcher.budget` tokens, short posts (verification blocks) whole
and first, long ones (prompts) in chunks of what the budget leaves, and hands each slot its rows.
A long prompt therefore delays the others by one chunk a step, never by its whole length.

Exactness: on the exact-rows build with covered weight types every row is bitwise the
one-token row whatever else its call holds, and with cells of its own a row's attention sums
over its own sequence only, so a request's rows, and so its output, are those it gets alone
(``tests/backends/test_slots.py`` certifies it, and shows a unified cache failing).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from spec_decode.backends.cores import available_cores
from spec_decode.backends.llamacpp.context import LlamaContext, Row
from spec_decode.backends.llamacpp.model import LlamaCppModel, gguf_file
from spec_decode.backends.llamacpp.promise import exact_rows

#: Tokens one step feeds at most: a verification block whole, a prompt in chunks. No more than
#: the block size the per-model promise checks (:mod:`.promise`), so shared calls stay exact.
DEFAULT_BUDGET = 64


@dataclass
class _Post:
    """Rows a slot asked to feed, how many are fed, and their output rows' logits so far."""

    rows: list[Row]
    fed: int = 0
    logits: list[np.ndarray] = field(default_factory=list)
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def left(self) -> int:
        return len(self.rows) - self.fed


class Batcher:
    """Decodes the rows its slots post on ``context``, together, a step at a time, on the
    thread that made it."""

    def __init__(self, context: LlamaContext, budget: int = DEFAULT_BUDGET) -> None:
        if budget < 1:
            raise ValueError(f"budget must be >= 1, got {budget}")
        self.context, self.budget = context, budget
        self._posts: list[_Post] = []
        self._ready = threading.Condition()
        self._decoding_thread = threading.get_ident()  # the thread that steps it: its creator
        self.steps = 0  #: decodes run
        self.shared_steps = 0  #: decodes that fed more than one slot's rows

    def decode(self, rows: list[Row]) -> np.ndarray:
        """Post ``rows`` (any thread) and wait until :meth:`step` fed them; the logits of their
        output rows, in order (a copy). A call from the decoding thread itself (loading,
        calibrating, warming up) is fed at once, alone."""
        if threading.get_ident() == self._decoding_thread:
            return self.context.decode(rows).copy()
        post = _Post(list(rows))
        with self._ready:
            self._posts.append(post)
            self._ready.notify_all()
        post.done.wait()
        if post.error is not None:
            raise RuntimeError(str(post.error)) from post.error
        if len(post.logits) == 1:
            return post.logits[0]
        return np.concatenate(post.logits or [np.empty((0, self.context.vocab_size), np.float32)])

    def wait(self, timeout: float | None = None) -> bool:
        """Block until some rows are posted (True) or ``timeout`` seconds pass (False)."""
        with self._ready:
            return self._ready.wait_for(lambda: bool(self._posts), timeout)

    def wake(self) -> None:
        """Wake whoever waits for posts (the :class:`Stepper` stopping)."""
        with self._ready:
            self._ready.notify_all()

    @property
    def pending(self) -> int:
        """Posts waiting to be fed, whole or in part."""
        with self._ready:
            return len(self._posts)

    def step(self) -> bool:
        """Feed one call's worth of what is posted (on the decoding thread); False if nothing
        was."""
        with self._ready:
            posts = sorted(self._posts, key=lambda p: p.left)  # short first: blocks before prompts
        if not posts:
            return False
        batch: list[Row] = []
        parts: list[tuple[_Post, int, int]] = []  # post, rows fed now, outputs among them
        for post in posts:
            take = min(post.left, self.budget - len(batch))
            if take <= 0:
                break
            chunk = post.rows[post.fed : post.fed + take]
            parts.append((post, take, sum(row.output for row in chunk)))
            batch += chunk
        try:
            logits = self.context.decode(batch)
        except Exception as error:  # every waiting slot hears it; the stepper goes on
            for post, _, _ in parts:
                post.error = error
                self._finish(post)
            return True
        self.steps += 1
        self.shared_steps += len(parts) > 1
        at = 0
        for post, take, outputs in parts:
            if outputs:
                post.logits.append(logits[at : at + outputs].copy())
                at += outputs
            post.fed += take
            if not post.left:
                self._finish(post)
        return True

    def _finish(self, post: _Post) -> None:
        with self._ready:
            self._posts.remove(post)
        post.done.set()


class Stepper:
    """Steps a target's and its draft's batchers on one thread (every decode from one thread),
    sleeping while neither has posts, until :meth:`stop`."""

    def __init__(self, batchers: list[Batcher]) -> None:
        self.batchers = batchers
        for batcher in batchers[1:]:  # one condition: a post to either wakes the stepper
            batcher._ready = batchers[0]._ready
        self._stopped = False

    def run(self) -> None:
        """Step until :meth:`stop` (on the thread that made the batchers)."""
        ready = self.batchers[0]._ready
        while not self._stopped:
            if any([batcher.step() for batcher in self.batchers]):
                continue
            with ready:
                ready.wait_for(
                    lambda: self._stopped or any(b._posts for b in self.batchers), timeout=1.0
                )

    def stop(self) -> None:
        """End :meth:`run` after its current step."""
        self._stopped = True
        self.batchers[0].wake()


def open_slots(
    path: str | Path,
    n_slots: int,
    *,
    n_threads: int | None = None,
    n_ctx: int | None = None,
    check_rows: bool = True,
    budget: int = DEFAULT_BUDGET,
) -> tuple[list[LlamaCppModel], Batcher]:
    """``n_slots`` models on one copy of the GGUF's weights, each on a sequence of its own
    (``n_ctx`` positions each) of one context, and the :class:`Batcher` that decodes their
    calls together. The exact-rows promise is made once, on the first slot, for all (a draft's,
    ``check_rows`` off, is the build's unchecked: see :class:`~.model.LlamaCppModel`)."""
    if n_slots < 1:
        raise ValueError(f"n_slots must be >= 1, got {n_slots}")
    file = gguf_file(path)
    threads = int(n_threads or available_cores())
    context = LlamaContext(file, n_threads=threads, n_ctx=n_ctx, n_seq=n_slots, unified=False)
    batcher = Batcher(context, budget)
    first = LlamaCppModel.on_sequence(file, context, 0, context.decode, None)
    promise = exact_rows(file, first.probe, first.vocab_size, first.context_window)
    promise = promise if check_rows else None
    models = [
        LlamaCppModel.on_sequence(file, context, seq, batcher.decode, promise)
        for seq in range(n_slots)
    ]
    return models, batcher
