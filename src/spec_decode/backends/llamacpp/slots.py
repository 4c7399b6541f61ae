"""Several sequences of one llama.cpp context decoded together: the server's slots.

Each slot is a :class:`~.model.LlamaCppModel` on a sequence of its own of a shared
:class:`~.context.LlamaContext`, driven by a request on a thread of its own.
When a slot needs rows it posts them (:meth:`Batcher.decode`) and waits. One thread runs
:meth:`Batcher.step` over and over (llama.cpp keeps a team of OpenMP threads for each calling
thread, so every decode comes from one): each step feeds what the slots have posted in ONE
``llama_decode``, as :func:`~.call_plan.plan_call` chooses, and hands each slot its rows.

- While a slot decodes, a call holds at most :attr:`Batcher.budget` tokens: verification blocks
  first, then the prompt with the fewest tokens left in a chunk of what the budget leaves. A long
  prompt therefore delays the others by one chunk a step, never by its whole length. While a
  prompt waits, a block is fed one row a call (its other rows follow in later calls): a block
  drafted before the prompt came must not delay its first token.
- A newcomer does not wait for a call in flight that reads no prompt: cutting or copying its
  slot's cells (:meth:`Batcher.between_calls`, then run on the decoding thread before the next
  call) and posting its prompt each interrupt that call
  (:meth:`~.context.LlamaContext.interrupt`, on the exact-rows build), whose cells are dropped and
  whose rows are fed again.
- While every running request waits for a prompt (nobody decodes), the shortest is read in one
  call of up to :attr:`Batcher.prompt_call` tokens, as alone: a call of many rows costs less a
  row than several calls of fewer.
- Prompts are read shortest first, one a step, since a prompt's tokens cost about as much
  together as apart (a pass over a CPU's weights is bound by arithmetic beyond a few rows): a
  second prompt in the call would delay the first one's first token by its own tokens' cost.

Each step waits, after the first post, until every running request (a :meth:`Batcher.member`)
has posted, at most :data:`GATHER_S`, so that their rows share one call as they come.

On the exact-rows build the slots share one unified cache (``LlamaContext.for_slots``): a call is
one pass whatever its rows. Elsewhere llama.cpp splits a call into micro-batches of consecutive
sequence ids with as many tokens from each (``llama_batch_allocr::split_equal``), each a pass of
its own, so a call's rows go in order of sequence (2, 0, 3, 1 make four passes).

Exactness: on the exact-rows build with covered weight types every row of a call of up to a
micro-batch is bitwise the one-token row whatever else its call holds
(:func:`~.kernels.invariant_batch_size`), and a row's attention visits its own sequence's cells
only, in the order a run alone holds them: a request's rows and output are those it gets alone,
however its prompt and blocks were cut and whatever call was interrupted (certified, with negative
controls, by ``tests/backends/test_slots.py`` and ``test_interrupt.py``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spec_decode.backends.cores import available_cores
from spec_decode.backends.llamacpp.call_plan import plan_call
from spec_decode.backends.llamacpp.context import Interrupted, LlamaContext, NoRoom, Row
from spec_decode.backends.llamacpp.gguf_header import gguf_file
from spec_decode.backends.llamacpp.kernels import MICRO_BATCH
from spec_decode.backends.llamacpp.model import LlamaCppModel
from spec_decode.backends.llamacpp.promise import exact_rows

#: Tokens one step feeds at most while a slot decodes: a verification block whole, a prompt in
#: chunks. No more than the block size the per-model promise makes (:mod:`.promise`), so shared
#: calls stay exact.
DEFAULT_BUDGET = 64
#: The longest a step waits, after the first post, for every running request to post.
GATHER_S = 0.05


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

    @property
    def is_prompt(self) -> bool:
        """Rows read for their cache, not scored: a prompt (a block's every row is output)."""
        return not all(row.output for row in self.rows)


@dataclass
class _Task:
    """Work to run on the decoding thread between two calls, and its outcome."""

    work: Callable[[], Any]
    result: Any = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)


class Batcher:
    """Decodes the rows its slots post on ``context``, together, a step at a time, on the
    thread that made it."""

    def __init__(
        self, context: LlamaContext, budget: int = DEFAULT_BUDGET, prompt_call: int = MICRO_BATCH
    ) -> None:
        if min(budget, prompt_call) < 1:
            raise ValueError(f"budget and prompt_call must be >= 1, got {budget}, {prompt_call}")
        self.context, self.budget, self.prompt_call = context, budget, prompt_call
        self._posts: list[_Post] = []
        self._tasks: list[_Task] = []
        self._ready = threading.Condition()
        self._decoding_thread = threading.get_ident()  # the thread that steps it: its creator
        self._members = 0  # requests running on the slots (each posts, waits, works, posts)
        self._interruptible = False  # a call in flight reads no prompt (see _next_call)
        self.steps = 0  #: decodes run
        self.shared_steps = 0  #: decodes that fed more than one slot's rows
        self.interrupted = 0  #: decodes a newcomer interrupted, then fed again

    def decode(self, rows: list[Row]) -> np.ndarray:
        """Post ``rows`` (any thread) and wait until :meth:`step` fed them; the logits of their
        output rows, in order (a copy). A call from the decoding thread itself (loading,
        calibrating, warming up) is fed at once, alone."""
        if threading.get_ident() == self._decoding_thread:
            return self.context.decode(rows).copy()
        post = _Post(list(rows))
        with self._ready:
            self._posts.append(post)
            if post.is_prompt:
                self._make_way()
            self._ready.notify_all()
        post.done.wait()
        if post.error is not None:  # NoRoom stays NoRoom: the model reads its sequence again
            kind = NoRoom if isinstance(post.error, NoRoom) else RuntimeError
            raise kind(str(post.error)) from post.error
        if len(post.logits) == 1:
            return post.logits[0]
        return np.concatenate(post.logits or [np.empty((0, self.context.vocab_size), np.float32)])

    def between_calls(self, work: Callable[[], Any]) -> Any:
        """Run ``work`` (llama.cpp calls on the contexts stepped with this batcher: cutting or
        copying a slot's cells) and return what it returns. While a call that reads no prompt is
        in flight, interrupt it and run ``work`` on the decoding thread before the next call (run
        here, it would wait for the lock of a call started after it); otherwise here and now,
        waiting for a call that reads a prompt to end (interrupting that would delay another
        newcomer's first token)."""
        with self._ready:
            if not self._interruptible:
                task = None
            else:
                task = _Task(work)
                self._tasks.append(task)
                self._make_way()
                self._ready.notify_all()
        if task is None:
            return work()
        task.done.wait()
        if task.error is not None:
            raise task.error
        return task.result

    def _make_way(self) -> None:
        """Interrupt the call in flight if it reads no prompt (called holding the lock)."""
        if self._interruptible:
            self.context.interrupt()
            self._interruptible = False

    def _run_tasks(self) -> bool:
        """Run the tasks posted (:meth:`between_calls`); whether there were any."""
        with self._ready:
            tasks, self._tasks = self._tasks, []
        for task in tasks:
            try:
                task.result = task.work()
            except BaseException as error:  # re-raised in the thread that asked
                task.error = error
            task.done.set()
        return bool(tasks)

    @contextlib.contextmanager
    def member(self) -> Iterator[None]:
        """A request runs on one of the slots for the block's duration: steps wait for its
        posts (see the module docstring)."""
        with self._ready:
            self._members += 1
        try:
            yield
        finally:
            with self._ready:
                self._members -= 1
                self._ready.notify_all()

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
        was (tasks posted run first: :meth:`between_calls`)."""
        ran = self._run_tasks()
        parts = self._next_call()
        if not parts:
            return ran
        batch = [row for _, chunk in parts for row in chunk]
        try:
            logits = self.context.decode(batch)
        except Interrupted:  # a newcomer came: nothing fed, the rows go again
            self._drop(batch)
            self.interrupted += 1
            return True
        except Exception as error:  # every waiting slot hears it; the stepper goes on
            for post, _ in parts:
                post.error = error
                self._finish(post)
            return True
        finally:
            with self._ready:
                self._interruptible = False
                self.context.clear_interrupt()
        self.steps += 1
        self.shared_steps += len(parts) > 1
        at = 0
        for post, chunk in parts:
            outputs = sum(row.output for row in chunk)
            if outputs:
                post.logits.append(logits[at : at + outputs].copy())
                at += outputs
            post.fed += len(chunk)
            if not post.left:
                self._finish(post)
        return True

    def _next_call(self) -> list[tuple[_Post, list[Row]]]:
        """The next call's posts and the rows fed of each, by sequence (see the module
        docstring), as :func:`plan_call` chooses; from then on, a prompt posted interrupts the
        call if it reads no prompt. One hold of the lock: no prompt comes unseen between."""
        with self._ready:
            posts = list(self._posts)
            # a batcher without members (a draft's: requests count on the target's) never
            # knows that nobody is about to decode
            all_posted = 0 < self._members <= len(posts)
            waiting = [(post.is_prompt, post.left) for post in posts]
            parts = [
                (posts[i], posts[i].rows[posts[i].fed : posts[i].fed + take])
                for i, take in plan_call(waiting, self.budget, self.prompt_call, all_posted)
            ]
            self.context.clear_interrupt()
            reads_prompt = any(post.is_prompt for post, _ in parts)
            self._interruptible = self.context.interruptible and bool(parts) and not reads_prompt
        return sorted(parts, key=lambda part: part[1][0].seqs)

    def _drop(self, batch: list[Row]) -> None:
        """Drop every cell an interrupted call of ``batch`` kept (llama.cpp dropped only those
        of the micro-batch it stopped in): each sequence's cells from its first row's position."""
        first: dict[int, int] = {}
        for row in batch:
            for seq in row.seqs:
                first[seq] = min(first.get(seq, row.position), row.position)
        for seq, position in first.items():
            self.context.forget(seq, position)

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
        """Step until :meth:`stop` (on the thread that made the batchers): once something is
        posted, wait until every member of the target's batcher has posted (at most
        :data:`GATHER_S`), then step."""
        ready = self.batchers[0]._ready
        while not self._stopped:
            with ready:
                ready.wait_for(lambda: self._stopped or self._tasks() or self._posts(), timeout=1.0)
                ready.wait_for(lambda: self._stopped or self._gathered(), timeout=GATHER_S)
            while any([batcher.step() for batcher in self.batchers]) and self._all_posted():
                pass  # everyone still waits for rows (a prompt read in chunks): step again

    def _posts(self) -> int:
        return sum(len(batcher._posts) for batcher in self.batchers)

    def _tasks(self) -> bool:
        return any(batcher._tasks for batcher in self.batchers)

    def _gathered(self) -> bool:  # a newcomer's task (interrupting a call) runs at once
        return self._tasks() or self._posts() >= self.batchers[0]._members

    def _all_posted(self) -> bool:
        with self.batchers[0]._ready:
            return self._gathered()

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
    context = LlamaContext.for_slots(file, n_threads=threads, n_ctx=n_ctx, n_seq=n_slots)
    batcher = Batcher(context, budget)
    first = LlamaCppModel.on_sequence(file, context, 0, context.decode, None)
    promise = (
        exact_rows(file, first.probe, first.vocab_size, first.context_window)
        if check_rows
        else None
    )
    models = [
        LlamaCppModel.on_sequence(file, context, seq, batcher.decode, promise)
        for seq in range(n_slots)
    ]
    return models, batcher
