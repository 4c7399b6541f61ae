"""Processors: rules that reweight a next-token row by the tokens generated before it (a logit
bias, frequency and presence penalties, a grammar's mask), applied along the drafted path.

A processor maps the target's row after a history h to a new row f(h, row). Target-only decoding
under processors samples from the processed rows, so speculative decoding reproduces it exactly
when every row it verifies is processed with that row's own history: row i of a drafted block
follows the committed tokens and drafts 1..i, so a penalty counts those drafts, a grammar's mask
is the grammar's state after them, and nothing a rejected draft touched reaches the next step.
:class:`ProcessedModel` is that: a model whose every row (one-token, block, tree node, exact
re-score) is the processed row of its own history. The rules, the residual and the coupled
rule's noise then read processed rows only, and every certificate of the sampler applies to it
unchanged. Engines that process only the committed prefix's row, or skip processing inside a
draft, are not exact; :mod:`spec_decode.certify.zoo.processors` builds them, and they fail.

A processor reads the *generated* tokens only (the OpenAI API's penalties count the completion,
and a response format constrains the answer, not the prompt), so a processed model is built for
one request, knowing where its prompt ends. Rows are probabilities: a bias b multiplies a token's
probability by exp(b) (adds b to its logit), a penalty by exp(-penalty), a mask by 0; the row is
normalised once all processors have run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from spec_decode.core.distributions import check_distributions
from spec_decode.core.errors import BadRequest
from spec_decode.core.models import Model, score
from spec_decode.core.sampling import Range

#: The values each processor's settings may take (the OpenAI API's ranges).
PROCESSOR_RANGES = {
    "frequency_penalty": Range(-2.0, 2.0),
    "presence_penalty": Range(-2.0, 2.0),
    "logit_bias": Range(-100.0, 100.0),
}


class Processor(Protocol):
    """Reweights rows in place: ``rows[i]`` (probabilities, not yet normalised) follows the
    generated tokens ``done`` and then ``paths[i]``. The result must be a function of that
    history and the row alone: a processor may cache state (a grammar matcher), never depend on
    which rows it saw before."""

    def process(
        self, done: Sequence[int], paths: Sequence[Sequence[int]], rows: np.ndarray
    ) -> None: ...


@dataclass(frozen=True, eq=False)
class LogitBias:
    """Adds ``bias[token]`` to the token's logit at every position (OpenAI's ``logit_bias``:
    -100 in effect bans a token, 100 in effect forces it)."""

    bias: Mapping[int, float]
    _ids: np.ndarray = field(init=False, repr=False)
    _factors: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        for token, value in self.bias.items():
            if isinstance(token, bool) or not isinstance(token, int | np.integer) or token < 0:
                raise BadRequest(f"logit_bias keys must be token ids, got {token!r}", "logit_bias")
            PROCESSOR_RANGES["logit_bias"].check("logit_bias", float(value))
        object.__setattr__(self, "_ids", np.fromiter(self.bias, dtype=np.int64))
        values = np.fromiter(self.bias.values(), dtype=np.float64)
        object.__setattr__(self, "_factors", np.exp(values))

    @property
    def is_identity(self) -> bool:
        return not self.bias

    def check_vocabulary(self, vocab_size: int) -> None:
        """Refuse a token id outside the model's vocabulary (a :class:`BadRequest`)."""
        outside = [int(t) for t in self._ids if t >= vocab_size]
        if outside:
            raise BadRequest(
                f"logit_bias names token ids outside the vocabulary of {vocab_size}: {outside[:5]}",
                "logit_bias",
            )

    def process(
        self, done: Sequence[int], paths: Sequence[Sequence[int]], rows: np.ndarray
    ) -> None:
        rows[:, self._ids] *= self._factors


@dataclass(frozen=True)
class Penalties:
    """OpenAI's penalties on tokens already generated: a token seen c > 0 times has
    ``frequency * c + presence`` subtracted from its logit (negative values encourage
    repetition). Counted over the generated tokens and the drafts before the row."""

    frequency: float = 0.0
    presence: float = 0.0

    def __post_init__(self) -> None:
        PROCESSOR_RANGES["frequency_penalty"].check("frequency_penalty", self.frequency)
        PROCESSOR_RANGES["presence_penalty"].check("presence_penalty", self.presence)

    @property
    def is_identity(self) -> bool:
        return self.frequency == 0 and self.presence == 0

    def process(
        self, done: Sequence[int], paths: Sequence[Sequence[int]], rows: np.ndarray
    ) -> None:
        seen, counts = np.unique(np.asarray(done, dtype=np.int64), return_counts=True)
        for row, path in zip(rows, paths, strict=True):
            ids, count = seen, counts
            if len(path):
                tokens = np.concatenate([seen, np.asarray(path, dtype=np.int64)])
                weights = np.concatenate([counts, np.ones(len(path), dtype=np.int64)])
                ids, where = np.unique(tokens, return_inverse=True)
                count = np.bincount(where, weights=weights)
            row[ids] *= np.exp(-(self.frequency * count + self.presence))


@dataclass(frozen=True, eq=False)
class TokenAutomaton:
    """A grammar over token ids as a finite automaton, starting in state 0: ``allowed[s]`` (a
    boolean row of the vocabulary's size) is what state s accepts, ``moves[s, t]`` the state
    after token t. The simplest mask processor, and the toy grammar of the certificates."""

    allowed: np.ndarray
    moves: np.ndarray

    def __post_init__(self) -> None:
        allowed, moves = np.asarray(self.allowed, dtype=bool), np.asarray(self.moves)
        if allowed.ndim != 2 or moves.shape != allowed.shape or not allowed.any(axis=1).all():
            raise ValueError("an automaton needs (states, V) tables and a token in every state")
        if moves.min() < 0 or moves.max() >= len(moves):
            raise ValueError("an automaton's moves must name its own states")
        object.__setattr__(self, "allowed", allowed)
        object.__setattr__(self, "moves", moves)

    def state(self, tokens: Sequence[int], start: int | None = 0) -> int | None:
        """The state after ``tokens`` from ``start``; None once a token is not accepted."""
        state = start
        for token in tokens:
            if state is None or not self.allowed[state, token]:
                return None
            state = int(self.moves[state, token])
        return state

    def process(
        self, done: Sequence[int], paths: Sequence[Sequence[int]], rows: np.ndarray
    ) -> None:
        committed = self.state(done)
        for row, path in zip(rows, paths, strict=True):
            state = self.state(path, committed)
            if state is not None:
                keep_only(row, self.allowed[state])


def keep_only(row: np.ndarray, allowed: np.ndarray) -> None:
    """Zero every entry of ``row`` that the boolean mask ``allowed`` forbids, in place.

    Should every allowed token have probability 0 (a row of underflowed entries), the allowed
    tokens share the row evenly: a function of the row and the mask, so target-only decoding
    and verification still agree. A row after a history the grammar already refused is left as
    it is by the mask processors: it follows a draft of probability 0, which no exact rule
    accepts, so the row is never read.
    """
    row[~allowed] = 0.0
    if not row.any():
        row[allowed] = 1.0


class ProcessedModel:
    """``model`` with ``processors`` applied to every row it gives, each row's history read
    from position ``start`` of its context on (the prompt's length: the generated tokens).

    Offers ``next_dist`` and ``score``, ``score_tree`` and ``exact_dist`` where the model has
    them, and every other attribute of the model except ``top_tokens`` (greedy steps then take
    the argmax of the processed rows). The model's ``block_tolerance`` still holds: a processor
    changes a token's logit by the same amount in a block row and in the one-token row.
    """

    _HIDDEN = frozenset({"top_tokens"})

    def __init__(self, model: Model, processors: Sequence[Processor], start: int) -> None:
        if not processors:
            raise ValueError("a processed model needs at least one processor")
        self.model, self.processors, self.start = model, tuple(processors), int(start)
        self.vocab_size = int(model.vocab_size)

    def next_dist(self, prefix: Sequence[int]) -> np.ndarray:
        return self.processed(prefix, [()], np.asarray(self.model.next_dist(prefix))[None])[0]

    def score(self, prefix: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        rows = score(self.model, prefix, tokens)
        return self.processed(prefix, [tokens[:i] for i in range(len(tokens) + 1)], rows)

    def __getattr__(self, name: str) -> Any:
        if name in self._HIDDEN:
            raise AttributeError(name)
        method = getattr(self.model, name)
        if name == "exact_dist":
            return lambda prefix: self.processed(prefix, [()], np.asarray(method(prefix))[None])[0]
        if name == "score_tree":
            return lambda prefix, tokens, parents: self.processed(
                prefix, [(), *tree_paths(tokens, parents)], method(prefix, tokens, parents)
            )
        return method

    def processed(
        self, prefix: Sequence[int], paths: Sequence[Sequence[int]], rows: np.ndarray
    ) -> np.ndarray:
        """``rows`` (row i after ``prefix + paths[i]``) through every processor, normalised."""
        if len(prefix) < self.start:
            raise ValueError(
                f"a context of {len(prefix)} tokens is shorter than the prompt ({self.start})"
            )
        rows = np.array(check_distributions(rows, self.vocab_size, "target rows"), copy=True)
        done = list(prefix[self.start :])
        for processor in self.processors:
            processor.process(done, paths, rows)
        mass = rows.sum(axis=-1, keepdims=True)
        if not np.all(mass > 0):
            raise ValueError("the processors left a row with no token of probability > 0")
        rows /= mass
        return rows


def tree_paths(tokens: Sequence[int], parents: Sequence[int]) -> list[list[int]]:
    """The path below the prefix to each node of a tree given as tokens and parent indices
    (-1: a child of the prefix; parents come first)."""
    paths: list[list[int]] = []
    for token, parent in zip(tokens, parents, strict=True):
        paths.append([*(paths[parent] if parent >= 0 else []), int(token)])
    return paths


def with_processors(model: Model, processors: Sequence[Processor], start: int) -> Model:
    """``model`` processed by the processors that change something (``model`` itself when
    none does)."""
    active = [p for p in processors if not getattr(p, "is_identity", False)]
    return ProcessedModel(model, active, start) if active else model
