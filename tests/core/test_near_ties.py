"""Settling noisy near-ties in the coupled step: on a target whose block rows are only close to
its one-token rows, coupled speculative output equals target-only output for every seed once the
rows whose choice could flip are replaced by the exact ones (chains and trees, every sampling
control); with settling off, or a stability test that ignores temperature, identity FAILS.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pytest
from test_choice_stable import FAST, SAMPLINGS  # the same seven sampling settings
from tiers import fast_only

from spec_decode import SamplingParams, draft_from_target, random_markov
from spec_decode.certify.identity import identity_certificate, target_only_run
from spec_decode.core import near_ties
from spec_decode.core.coupled import coupled_rule, coupled_tree_rule
from spec_decode.core.models import MarkovModel
from spec_decode.core.near_ties import settle_rows, settling_tolerance
from spec_decode.core.noise import positional_source
from spec_decode.drafting.lookup import PromptLookupDrafter
from spec_decode.drafting.speculative import generate_speculative, generate_tree

VOCAB, TOKENS, K = 6, 12, 3
PROMPT = [0, 1, 2, 3, 0, 1, 2, 3, 0, 1]
#: The toy target's stated tolerance; its block rows move logits by up to half of it.
TOLERANCE = 0.02


def perturbed(rng: np.random.Generator, row: np.ndarray, tolerance: float) -> np.ndarray:
    """``row`` with every logit moved by -tolerance/2 or +tolerance/2, renormalised."""
    logits = np.log(row) + rng.choice([-0.5, 0.5], row.size) * tolerance
    probs = np.exp(logits - logits.max())
    return probs / probs.sum()


class BlockRoundingTarget:
    """A Markov target whose block rows (``score``, ``score_tree``) are its exact rows with every
    logit moved by +-``tolerance``/2, a function of the row's context (as rounding is), while
    ``next_dist`` (target-only decoding) and ``exact_dist`` give the exact rows."""

    def __init__(self, model: MarkovModel, tolerance: float, settles: bool = True) -> None:
        self.model, self.vocab_size = model, model.vocab_size
        self.stated = tolerance
        self.settles = settles
        self.rows = self.exact_rows = 0

    @property
    def block_tolerance(self) -> float | None:
        return self.stated if self.settles else None

    def next_dist(self, prefix: Sequence[int]) -> np.ndarray:
        return self.model.next_dist(prefix)

    def exact_dist(self, context: Sequence[int]) -> np.ndarray:
        self.exact_rows += 1
        return self.model.next_dist(context)

    def _block_row(self, context: Sequence[int]) -> np.ndarray:
        self.rows += 1
        digest = hashlib.sha256(np.asarray(context, dtype=np.int64).tobytes()).digest()
        rng = np.random.default_rng(int.from_bytes(digest[:8], "little"))
        return perturbed(rng, self.model.next_dist(context), self.stated)

    def score(self, prefix: Sequence[int], tokens: Sequence[int]) -> np.ndarray:
        prefix, tokens = list(prefix), list(tokens)
        return np.stack([self._block_row(prefix + tokens[:i]) for i in range(len(tokens) + 1)])

    def score_tree(
        self, prefix: Sequence[int], tokens: Sequence[int], parents: Sequence[int]
    ) -> np.ndarray:
        paths: list[list[int]] = []
        for token, parent in zip(tokens, parents, strict=True):
            paths.append(([] if parent < 0 else paths[parent]) + [token])
        return np.stack([self._block_row(list(prefix) + path) for path in [[], *paths]])


def pair() -> tuple[MarkovModel, MarkovModel]:
    """A flat-ish target (many close choices) and a draft of agreement 0.7."""
    target = random_markov(VOCAB, seed=3, concentration=2.0)
    return target, draft_from_target(target, 0.7, seed=4, concentration=2.0)


def run(drafter: str, target: BlockRoundingTarget, draft: MarkovModel, sampling: SamplingParams):
    if drafter == "tree":
        return lambda source, n: generate_tree(
            target, draft, PROMPT, n, (2, 2), source, sampling=sampling, rule=coupled_tree_rule
        )
    chain = {"lookup": PromptLookupDrafter(VOCAB, max_ngram=2), "model": None}[drafter]
    return lambda source, n: generate_speculative(
        target, draft, PROMPT, n, K, source, sampling=sampling, rule=coupled_rule, drafter=chain
    )


def certify(drafter: str, sampling: SamplingParams, seeds: range, settles: bool = True):
    exact, draft = pair()
    target = BlockRoundingTarget(exact, TOLERANCE, settles)
    speculative = run(drafter, target, draft, sampling)
    certificate = identity_certificate(
        speculative, target_only_run(exact, PROMPT, sampling), seeds, TOKENS
    )
    return certificate, target


def test_settling_needs_a_stated_tolerance_and_exact_rows():
    exact, _ = pair()
    assert settling_tolerance(BlockRoundingTarget(exact, TOLERANCE)) == TOLERANCE
    assert settling_tolerance(BlockRoundingTarget(exact, TOLERANCE, settles=False)) is None
    assert settling_tolerance(exact) is None  # no exact_dist, no tolerance
    rows = np.full((2, VOCAB), 1 / VOCAB)
    target = BlockRoundingTarget(exact, 100.0)  # a tolerance no choice survives: all flagged
    source = positional_source(0)
    settled = settle_rows(target, SamplingParams(1.0), rows, source, PROMPT, [[], [2]])
    assert target.exact_rows == 2
    np.testing.assert_array_equal(settled[1], exact.next_dist([*PROMPT, 2]))
    assert settle_rows(target, SamplingParams(0.0), rows, source, PROMPT, [[], [2]]) is rows


DRAFTERS = ["lookup", "model", "tree"]
#: Seeds of the slow tier, per setting.
SEEDS = 250


@pytest.mark.parametrize("sampling_name", fast_only(SAMPLINGS, FAST))
@pytest.mark.parametrize("drafter", DRAFTERS)
def test_settled_coupled_output_is_target_only_output(drafter, sampling_name):
    certificate, target = certify(drafter, SAMPLINGS[sampling_name], range(40))
    assert certificate.passed and certificate.exercised, certificate
    assert 0 < target.exact_rows < target.rows


@pytest.mark.slow
@pytest.mark.parametrize("sampling_name", SAMPLINGS)
@pytest.mark.parametrize("drafter", DRAFTERS)
def test_settled_identity_over_many_seeds(drafter, sampling_name):
    """250 seeds a setting (the 1,000-seed identity certificate of the rule itself is
    tests/certify/test_identity.py); the broken variants below fail within them."""
    certificate, target = certify(drafter, SAMPLINGS[sampling_name], range(SEEDS))
    assert certificate.seeds == SEEDS
    assert certificate.passed, certificate.mismatched
    assert 0 < target.exact_rows < target.rows


@pytest.mark.slow
@pytest.mark.parametrize("drafter", DRAFTERS)
def test_without_settling_identity_fails(drafter):
    certificate, target = certify(drafter, SAMPLINGS["T=0.7"], range(SEEDS), settles=False)
    assert not certificate.passed
    assert target.exact_rows == 0


@pytest.mark.slow
def test_a_test_that_ignores_temperature_fails(monkeypatch):
    """The broken test reads the warped row's log-weights as if they moved by the raw
    tolerance: at T = 0.3 they move by 1 / T times more, so it lets through rows that flip."""

    def ignoring_temperature(sampling, raw_row, noise, tolerance):
        weights, surely, possibly = sampling.kept_bounds(raw_row, tolerance * sampling.temperature)
        return noise.is_stable(sampling.warp(raw_row), weights, surely, possibly, tolerance)

    monkeypatch.setattr(near_ties, "choice_stable", ignoring_temperature)
    certificate, _ = certify("model", SAMPLINGS["T=0.3"], range(SEEDS))
    assert not certificate.passed
