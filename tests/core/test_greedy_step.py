"""The greedy step's certificate: for every context of a small model and every proposal up to
three tokens, :func:`greedy_step` emits what the exact and the coupled rules emit through
:func:`planned_step` on the warped rows (each enumerated over every random path: one output, with
probability 1), and that is greedy target-only decoding computed independently. Three broken
variants FAIL it: a step that keeps every draft, a model whose top tokens are read off the wrong
row, and one that breaks ties towards the highest id.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from spec_decode import SamplingParams, random_markov
from spec_decode.certify.enumeration import enumerate_outputs
from spec_decode.core import steps as steps_module
from spec_decode.core.coupled import coupled_rule
from spec_decode.core.generate import generate
from spec_decode.core.models import MarkovModel, Model, greedy_tokens
from spec_decode.core.noise import positional_source
from spec_decode.core.rules import exact_rule
from spec_decode.core.steps import ONLY, PolicyPlanner, greedy_step, planned_step, target_step
from spec_decode.drafting.policies import as_policy

VOCAB = 4
GREEDY = SamplingParams(temperature=0)
#: Order 2 over 4 tokens, some rows with tied maxima (ties go to the lowest id).
TARGET = random_markov(VOCAB, seed=5, order=2, concentration=0.4)


def with_ties(model: MarkovModel) -> MarkovModel:
    """``model`` with every other row's largest entry copied to another token, then normalised:
    rows with two maxima, one of them not the lowest id."""
    rows = model.rows.copy()
    for i, row in enumerate(rows[::2]):
        row[(np.argmax(row) + 1 + i) % VOCAB] = row.max()
    rows /= rows.sum(axis=1, keepdims=True)
    return MarkovModel(rows.reshape(model.table.shape))


TIED = with_ties(TARGET)
CONTEXTS = [list(c) for c in itertools.product(range(VOCAB), repeat=2)]
PROPOSALS = [list(p) for n in range(4) for p in itertools.product(range(VOCAB), repeat=n)]


STEP_NAMES = ("greedy", "exact", "coupled")


class FixedDrafter:
    """Proposes the first k of a fixed token list, with one-hot q rows."""

    def __init__(self, tokens: Sequence[int]) -> None:
        self.vocab_size, self.tokens = VOCAB, list(tokens)

    def propose(self, prefix, k, rng):
        tokens = self.tokens[:k]
        return tokens, np.eye(VOCAB)[tokens].reshape(len(tokens), VOCAB)


def greedy_reference(model: Model, context: list[int], n: int) -> list[int]:
    """Greedy target-only decoding from the rows themselves (lowest id on ties)."""
    out: list[int] = []
    for _ in range(n):
        out.append(int(np.argmax(model.next_dist(context + out))))
    return out


def run(name: str, step_of: Callable, model: Model, context, proposal) -> list:
    """Every output of generating len(proposal) + 1 tokens with the step built by ``step_of``,
    with its probability (enumerated over every random draw; as positional noise for the
    coupled rule)."""
    n = len(proposal) + 1
    step = step_of(FixedDrafter(proposal))
    as_source = positional_source if name == "coupled" else (lambda source: source)
    outputs = enumerate_outputs(
        lambda source: generate(model, step, context, n, as_source(source)).tokens
    )
    return sorted(outputs.distribution.items())


def mismatches(
    model: Model, model_for_greedy: Model | None = None, names: Sequence[str] = STEP_NAMES
) -> list[tuple]:
    """The (context, proposal) pairs where the greedy step, the exact rule, the coupled rule and
    greedy target-only decoding do not all emit one and the same output."""
    greedy_model = model_for_greedy or model
    planner = PolicyPlanner(as_policy(3))
    steps = {
        "greedy": lambda d: greedy_step(greedy_model, {ONLY: d}, planner),
        "exact": lambda d: planned_step(model, {ONLY: d}, planner, exact_rule, GREEDY),
        "coupled": lambda d: planned_step(model, {ONLY: d}, planner, coupled_rule, GREEDY),
    }
    bad = []
    for context, proposal in itertools.product(CONTEXTS, PROPOSALS):
        expected = [(tuple(greedy_reference(model, context, len(proposal) + 1)), 1.0)]
        for name in names:
            step_of = steps[name]
            got = run(name, step_of, model, context, proposal)
            if len(got) != 1 or got[0][0] != expected[0][0] or abs(got[0][1] - 1) > 1e-12:
                bad.append((name, context, proposal, got, expected))
    return bad


@pytest.mark.parametrize("model", [TARGET, TIED], ids=["random", "with ties"])
def test_greedy_step_emits_what_both_exact_rules_emit_for_every_proposal(model):
    assert not mismatches(model)


def test_greedy_target_step_reads_the_same_top_tokens():
    for context in CONTEXTS:
        trace = generate(TIED, target_step(TIED, GREEDY), context, 5, np.random.default_rng(0))
        assert trace.tokens == greedy_reference(TIED, context, 5)


def test_a_step_that_keeps_every_draft_fails(monkeypatch):
    monkeypatch.setattr(steps_module, "leading_matches", lambda drafted, emitted: len(drafted))
    assert mismatches(TARGET, names=["greedy"])


class ShiftedRows:
    """A backend bug: ``top_tokens`` reads each row's argmax off the next row."""

    vocab_size = VOCAB

    def __init__(self, model: MarkovModel) -> None:
        self.model = model

    def next_dist(self, prefix):
        return self.model.next_dist(prefix)

    def top_tokens(self, prefix, tokens):
        rows = [
            self.model.next_dist(list(prefix) + list(tokens[:i])) for i in range(len(tokens) + 1)
        ]
        top = np.argmax(rows, axis=-1)
        return np.append(top[1:], top[-1])


class HighestIdOnTies(ShiftedRows):
    """A backend bug: ties go to the highest id, not the lowest as the warp's argmax."""

    def top_tokens(self, prefix, tokens):
        rows = [
            self.model.next_dist(list(prefix) + list(tokens[:i])) for i in range(len(tokens) + 1)
        ]
        return VOCAB - 1 - np.argmax(np.asarray(rows)[:, ::-1], axis=-1)


@pytest.mark.parametrize("broken", [ShiftedRows, HighestIdOnTies])
def test_a_model_whose_top_tokens_are_not_its_rows_argmax_fails(broken):
    assert mismatches(TIED, broken(TIED), names=["greedy"])


def test_greedy_tokens_checks_what_a_model_returns():
    class OutOfRange(ShiftedRows):
        def top_tokens(self, prefix, tokens):
            return [VOCAB] * (len(tokens) + 1)

    class TooFew(ShiftedRows):
        def top_tokens(self, prefix, tokens):
            return [0]

    for broken in (OutOfRange, TooFew):
        with pytest.raises(ValueError, match="top tokens"):
            greedy_tokens(broken(TARGET), [0, 1], [2])


def test_a_planned_proposal_outside_the_vocabulary_is_a_clear_error():
    from spec_decode.core.protocols import Plan
    from spec_decode.core.trace import Trace

    class OutOfVocabulary:
        def plan(self, context, trace, k_max):
            return Plan("lookup", 2, {"lookup": [1, VOCAB]})

    step = greedy_step(TARGET, {"lookup": FixedDrafter([1, 2])}, OutOfVocabulary())
    with pytest.raises(ValueError, match="outside the vocabulary"):
        step([0, 1], 5, Trace(), np.random.default_rng(0))
