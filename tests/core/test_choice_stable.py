"""The stability test of a noisy choice never overstates: a seeded sweep over
every sampling control and sampler, rows of several shapes (exact ties and zero entries among
them, a vocabulary of two race levels), each perturbed many times by logit moves whose pairwise
change is at most the tolerance (corners of the allowed box, the hardest case for a choice),
with positional noise of a fresh position per row. A choice called stable never flips; the
perturbations do flip the others; and the test passes nearly every row at a realistic
tolerance, so settling is rare.
"""

from __future__ import annotations

import numpy as np
import pytest
from tiers import fast_only

from spec_decode import SamplingParams
from spec_decode.core.noise import SAMPLERS, positional_source
from spec_decode.core.samplers import NOISE_BLOCK, choice_stable

SAMPLINGS = {
    "T=0.3": SamplingParams(0.3),
    "T=0.7": SamplingParams(0.7),
    "T=1": SamplingParams(1.0),
    "T=0.7 top-k 3": SamplingParams(0.7, top_k=3),
    "T=1 top-p 0.8": SamplingParams(1.0, top_p=0.8),
    "T=1 min-p 0.1": SamplingParams(1.0, min_p=0.1),
    "T=0.7 all three": SamplingParams(0.7, top_k=4, top_p=0.9, min_p=0.05),
}
#: The settings the fast tier runs (the full suite runs all seven).
FAST = ["T=0.7", "T=0.7 all three"]

#: Rows per (sampling, sampler, shape) and perturbations per row in the margin sweep.
ROWS, PERTURBATIONS = 150, 12
#: The sweep's tolerance: large, so that many rows sit within it of a flip.
SWEEP_TOLERANCE = 0.05


def random_row(rng: np.random.Generator, vocab: int) -> np.ndarray:
    """A softmax row of logits of random scale, sometimes with exact ties and zero entries."""
    logits = rng.normal(0, rng.choice([0.5, 2.0, 6.0]), vocab)
    if rng.random() < 0.2:  # exact ties
        logits[rng.integers(vocab)] = logits[rng.integers(vocab)]
    if rng.random() < 0.2:  # entries of zero probability
        logits[rng.choice(vocab, vocab // 4, replace=False)] = -np.inf
        logits[rng.integers(vocab)] = 0.0
    probs = np.exp(logits - logits.max())
    return probs / probs.sum()


def perturbed(rng: np.random.Generator, row: np.ndarray, tolerance: float) -> np.ndarray:
    """``row`` with every logit moved by -tolerance/2 or +tolerance/2 (pairwise change at most
    ``tolerance``), renormalised; zeros stay zero."""
    with np.errstate(divide="ignore"):
        logits = np.log(row) + rng.choice([-0.5, 0.5], row.size) * tolerance
    probs = np.exp(logits - logits.max())
    return probs / probs.sum()


def sweep(sampling: SamplingParams, sampler: str, vocab: int, seed: int):
    """(rows called stable at the sweep's tolerance, rows checked, flips on such rows, flips on
    the other rows) over the sweep."""
    rng = np.random.default_rng(seed)
    source = positional_source(seed, sampler)
    stable = flips_on_stable = flips_on_flagged = 0
    for position in range(ROWS):
        row, noise = random_row(rng, vocab), source.noise(position)
        choice = noise.choose(sampling.warp(row))
        is_stable = choice_stable(sampling, row, noise, SWEEP_TOLERANCE)
        stable += is_stable
        for _ in range(PERTURBATIONS):
            other = noise.choose(sampling.warp(perturbed(rng, row, SWEEP_TOLERANCE)))
            if other != choice:
                flips_on_stable += is_stable
                flips_on_flagged += not is_stable
    return stable, ROWS, flips_on_stable, flips_on_flagged


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("sampling_name", fast_only(SAMPLINGS, FAST))
def test_a_choice_called_stable_never_flips(sampling_name, sampler):
    sampling = SAMPLINGS[sampling_name]
    vocabs = (12, NOISE_BLOCK + 300) if sampler == "race" else (12,)  # two race levels too
    for seed, vocab in enumerate(vocabs):
        stable, _, flips_on_stable, _ = sweep(sampling, sampler, vocab, seed)
        assert flips_on_stable == 0
        assert stable > 0


def test_the_sweep_can_see_a_flip():
    """The perturbations do flip choices: on the rows the test flags."""
    flagged_flips = sum(sweep(SAMPLINGS["T=0.3"], "race", 12, seed)[3] for seed in range(3))
    assert flagged_flips > 0


@pytest.mark.parametrize("sampling_name", fast_only(SAMPLINGS, FAST))
def test_the_stable_test_is_not_vacuous(sampling_name):
    """At the sweep's large tolerance most small rows pass; at a realistic tolerance nearly all
    rows pass, on a large vocabulary too (where some token nearly always sits near a top-p or
    min-p cut)."""
    sampling = SAMPLINGS[sampling_name]
    stable, rows, _, _ = sweep(sampling, "race", 12, 0)
    assert stable > rows // 2
    rng, source = np.random.default_rng(7), positional_source(7)
    for vocab in (50, 5000):
        rows = [random_row(rng, vocab) for _ in range(200)]
        passed = [choice_stable(sampling, r, source.noise(t), 1e-3) for t, r in enumerate(rows)]
        assert np.mean(passed) > 0.95, vocab


def test_greedy_rows_are_left_to_the_backend_and_unknown_noise_always_settles():
    row = np.array([0.5, 0.5 - 1e-9, 1e-9])
    assert choice_stable(SamplingParams(0.0), row, positional_source(0).noise(0), 1.0)

    class Opaque:
        def choose(self, probs):
            return 0

    assert not choice_stable(SamplingParams(1.0), row, Opaque(), 1e-3)
