"""The engine's slots: which models a request runs on, and which slot a new request takes.

A slot is one sequence of the target (and of the draft) with its own KV cache, kept across
requests, and its own suffix drafters. A new request takes the free slot whose cached tokens
share the longest prefix with its prompt (the next turn of a conversation finds its own cache, as
llama-server picks a slot by similarity), else the free slot used least recently. Where a busy
slot's cache holds a longer prefix of the prompt (agents sharing a system prompt and tools, sent
at once), its cells are copied into the slot taken (:meth:`SlotTable.take`), rather than read
again.

The shared suffix history may not change while a request that reads it runs
(:class:`~spec_decode.drafting.suffix.SuffixHistory`), so with several requests in flight a
finished sequence is added once no request runs (:class:`IdleHistory`).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from spec_decode.backends.prefix_cache import common_prefix
from spec_decode.drafting.auto import suffix_drafter
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.suffix import SuffixDrafter, SuffixHistory

#: The fewest prompt tokens more than its own slot holds that a request must find in a busy
#: slot's cache for the cells to be copied: llama.cpp copies a slot's whole cache, which costs
#: about what reading a few tokens does.
MIN_COPIED = 32


@dataclass
class Slot:
    """One sequence of each model, and what a request on it keeps for the next."""

    index: int
    target: Any
    draft: Any | None
    #: the auto planner's suffix drafters, with and without the history: a follow-up turn's
    #: prompt extends the last context, so only its new tokens are indexed
    suffix: dict[bool, SuffixDrafter] = field(default_factory=dict)
    last_used: float = 0.0
    #: the running request's prompt, of which the target's cache holds only a prefix (cells
    #: that stay until the slot is taken again): what another request may copy (None: free)
    prompt: tuple[int, ...] | None = None
    #: whether the running request has read its whole prompt (its first step ended)
    read: bool = False
    #: how many prompt tokens the running request found in the target's cache
    kept: int = 0

    @property
    def models(self) -> list[Any]:
        """The target's sequence, then the draft's if there is one."""
        return [self.target] + ([self.draft] if self.draft is not None else [])

    def keep_reusable(self, prompt: list[int], reuse: bool) -> int:
        """Keep what each model's cache may reuse for ``prompt`` (nothing unless ``reuse`` and
        the backend can say); return the target's kept length."""
        kept = []
        for model in self.models:
            keep = getattr(model, "keep_reusable", None)
            if reuse and keep is not None:
                kept.append(keep(prompt))
            else:
                model.reset()
                kept.append(0)
        return kept[0]

    def suffix_drafter(
        self, costs: CostCurve, k: int, shared: SuffixHistory | None
    ) -> SuffixDrafter:
        """The auto planner's suffix drafter reading ``shared`` (or no history), kept across
        this slot's requests and told a new one begins."""
        suffix = self.suffix.get(shared is not None)
        if suffix is None:
            suffix = suffix_drafter(costs, self.target.vocab_size, k, shared)
            self.suffix[shared is not None] = suffix
        suffix.begin_request()
        return suffix

    def shared_prefix(self, prompt: Sequence[int]) -> int:
        """How many leading tokens of ``prompt`` the target's cache already holds."""
        unread = getattr(self.target, "unread", None)
        return 0 if unread is None else len(prompt) - unread(prompt)


class SlotTable:
    """The slots and which are busy; :meth:`take` lends one to a request.

    ``between_calls`` runs a cut or a copy of a slot's cells where llama.cpp's calls run (the
    batcher's :meth:`~spec_decode.backends.llamacpp.slots.Batcher.between_calls`, which also
    interrupts a call in flight for it; default: here and now)."""

    def __init__(
        self,
        targets: Sequence[Any],
        drafts: Sequence[Any] | None,
        between_calls: Callable[[Callable[[], Any]], Any] | None = None,
    ) -> None:
        drafts = drafts or [None] * len(targets)
        self.slots = [Slot(i, t, d) for i, (t, d) in enumerate(zip(targets, drafts, strict=True))]
        self._between_calls = between_calls or (lambda work: work())
        self._free = threading.Condition()
        self._busy: set[int] = set()

    @property
    def busy(self) -> int:
        """Slots running a request now."""
        with self._free:
            return len(self._busy)

    @contextlib.contextmanager
    def take(self, prompt: Sequence[int], reuse: bool = False) -> Iterator[Slot]:
        """Lend the free slot that suits ``prompt`` best (waiting for one if none is free),
        its caches cut to what ``prompt`` may reuse (nothing unless ``reuse``; :attr:`Slot.kept`
        says how much the target kept), and take it back afterwards. With ``reuse``, a busy
        slot's cells for a longer prefix of ``prompt`` are copied in first
        (:meth:`_copy_prefix`)."""
        prompt = list(prompt)
        with self._free:
            self._free.wait_for(lambda: len(self._busy) < len(self.slots))
            free = [s for s in self.slots if s.index not in self._busy]
            slot = max(free, key=lambda s: (s.shared_prefix(prompt), -s.last_used))
            self._busy.add(slot.index)
            if reuse:
                self._copy_prefix(slot, prompt)
            slot.kept = self._between_calls(lambda: slot.keep_reusable(prompt, reuse))
            slot.prompt, slot.read = tuple(prompt), False  # published: others may copy it
        try:
            yield slot
        finally:
            with self._free:
                slot.last_used = time.monotonic()
                slot.prompt = None
                self._busy.discard(slot.index)
                self._free.notify_all()  # whoever waits for a slot, or for this one's prompt

    def prompt_read(self, slot: Slot) -> None:
        """``slot``'s request has read its whole prompt (its first step ended): whoever waits to
        copy its cells may."""
        with self._free:
            slot.read = True
            self._free.notify_all()

    def _copy_prefix(self, slot: Slot, prompt: list[int]) -> None:
        """Copy into ``slot``'s target the cells of the busy slot whose prompt shares the longest
        prefix with ``prompt``, when that is :data:`MIN_COPIED` tokens more than ``slot`` holds
        (at least one token is left to read). A donor still reading its prompt is waited for
        (the lock released meanwhile): prompts are read one at a time, so the wait costs
        nothing that reading the prefix again would not. Called holding the lock: a published
        prompt's cells stay as they are until its slot is free and taken again."""
        adopt = getattr(slot.target, "adopt", None)
        donors = [s for s in self.slots if s.prompt is not None]
        if adopt is None or not donors:
            return
        shared = [min(common_prefix(list(s.prompt), prompt), len(prompt) - 1) for s in donors]
        best = max(range(len(donors)), key=shared.__getitem__)
        if shared[best] < slot.shared_prefix(prompt) + MIN_COPIED:
            return
        donor, published = donors[best], donors[best].prompt
        self._free.wait_for(lambda: donor.read or donor.prompt is not published)
        if donor.prompt is published:
            self._between_calls(lambda: adopt(donor.target, prompt[: shared[best]]))


class IdleHistory:
    """A :class:`SuffixHistory` that takes finished sequences at once when one request runs at
    a time, and otherwise holds them until no request runs."""

    def __init__(self, history: SuffixHistory) -> None:
        self.history = history
        self._lock = threading.Lock()
        self._running = 0
        self._held: list[list[int]] = []

    @contextlib.contextmanager
    def request(self) -> Iterator[None]:
        """Count a request as running while the block runs."""
        with self._lock:
            self._running += 1
        try:
            yield
        finally:
            with self._lock:
                self._running -= 1
                if not self._running:
                    for tokens in self._held:
                        self.history.add(tokens)
                    self._held.clear()

    def add(self, tokens: list[int]) -> None:
        """Add ``tokens`` (a finished request's sequence, called inside :meth:`request`) once
        no other request runs."""
        with self._lock:
            self._held.append(tokens)


def batching_refusal(target: Any) -> str | None:
    """Why a target's slots may not share calls (None when they may): their rows must be
    bitwise their solo rows whatever shares a call, which the exact-rows build gives for the
    weight types it covers (:mod:`spec_decode.backends.llamacpp.promise`)."""
    if len(target.slots) == 1:
        return None
    promise = getattr(target.model, "exact_rows", None)
    if promise is None or promise.size < target.batcher.budget:
        why = promise.why if promise is not None else "no exact-rows promise"
        return f"one request at a time: rows of shared calls would not be solo rows ({why})"
    return None
