"""Tree speculation's certificates: the exhaustive one on every sampling control and both
drawing modes, the statistical one, and the broken variants each of them FAILS.

Statistical tests: significance 1e-3 each; the sample size comes from ``samples_for_power`` so each
test detects any total-variation distance >= 0.06 over its cells with probability >= 0.99. They
use a peaked draft unrelated to the target, so rejections are frequent and siblings drawn without
replacement remove a lot of mass: the broken variants then differ from the target by TV > 0.1.
"""

from __future__ import annotations

import itertools

import pytest
from tree_pairs import pair

from spec_decode import (
    SamplingParams,
    draft_from_target,
    random_markov,
)
from spec_decode.certify.exhaustive import exact_tree_distribution
from spec_decode.certify.generators import tree_generator
from spec_decode.certify.goodness_of_fit import samples_for_power
from spec_decode.certify.reference import TV_TOLERANCE
from spec_decode.certify.statistical import statistical_certificate
from spec_decode.certify.zoo.trees import UnadjustedTreeDrafter, tree_without_residual_update

# ---- exhaustive certificate --------------------------------------------------------------------

CONTROLS = {
    "plain": SamplingParams(),
    "temperature 0.7, top-k 2": SamplingParams(temperature=0.7, top_k=2),
    "top-p 0.8": SamplingParams(top_p=0.8),
    "greedy": SamplingParams(temperature=0),
}
#: (vocabulary, widths, tokens, Markov order): every case covers at least one full tree step.
CASES = [
    (2, (2, 1), 3, 1),
    (2, (2, 2), 3, 1),
    (3, (2,), 3, 1),
    (3, (2, 1), 3, 1),
    (3, (1, 2), 3, 1),
    (4, (2,), 2, 1),
    (4, (3,), 2, 1),
    (3, (3,), 2, 2),
    (2, (2, 1), 3, 2),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("case", "replacement", "control"), list(itertools.product(CASES, [True, False], CONTROLS))
)
def test_tree_generator_is_exact(case, replacement, control):
    vocab, widths, n_tokens, order = case
    target, draft = pair(vocab, order)
    result = exact_tree_distribution(
        target,
        draft,
        [0] * order,
        n_tokens,
        widths,
        sampling=CONTROLS[control],
        replacement=replacement,
    )
    assert abs(result.total_probability - 1) < TV_TOLERANCE
    assert result.tv < TV_TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize("replacement", [True, False])
def test_tree_generator_is_exact_over_two_full_steps(replacement):
    target, draft = pair(3)
    result = exact_tree_distribution(target, draft, [0], 4, (2,), replacement=replacement)
    assert abs(result.total_probability - 1) < TV_TOLERANCE
    assert result.tv < TV_TOLERANCE


#: The broken variants of spec_decode.certify.zoo.trees, as generator arguments for a given draft
#: and controls.
BROKEN = {
    "residual not updated between siblings": lambda draft, sampling: {
        "rule": tree_without_residual_update
    },
    "without replacement, verified with the unadjusted q": lambda draft, sampling: {
        "drafter": UnadjustedTreeDrafter(draft, sampling)
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("name", BROKEN)
@pytest.mark.parametrize("control", ["plain", "temperature 0.7"])
def test_exhaustive_certificate_fails_the_broken_variants(name, control):
    sampling = SamplingParams(temperature=0.7) if control != "plain" else SamplingParams()
    target, draft = pair(3)
    result = exact_tree_distribution(
        target, draft, [0], 3, (2, 1), sampling=sampling, **BROKEN[name](draft, sampling)
    )
    assert result.tv > 1e-3


def test_broken_residual_is_invisible_on_a_chain():
    """With one child per node the 'no update' rule IS the exact rule: only trees expose it."""
    target, draft = pair(3)
    result = exact_tree_distribution(
        target, draft, [0], 3, (1, 1), rule=tree_without_residual_update
    )
    assert result.tv < TV_TOLERANCE


# ---- statistical certificate -------------------------------------------------------------------

SIGNIFICANCE = 1e-3
DETECTABLE_TV = 0.06
RUNS = samples_for_power(cells=4 * 4, tv=DETECTABLE_TV, significance=SIGNIFICANCE, power=0.99)


@pytest.fixture
def peaked_pair():
    """A 4-token target and a peaked draft unrelated to it."""
    target = random_markov(4, seed=1)
    return target, draft_from_target(target, 0.0, seed=2, concentration=0.2)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("widths", "kwargs"),
    [
        ((2, 1), {}),
        ((3,), {"replacement": False, "sampling": SamplingParams(temperature=0.8, top_k=3)}),
    ],
)
def test_statistical_certificate_passes(peaked_pair, widths, kwargs):
    target, draft = peaked_pair
    generate = tree_generator(target, draft, [0], widths, **kwargs)
    depth = len(widths)
    certificate = statistical_certificate(
        generate,
        target,
        [0],
        depth,
        RUNS,
        seed=11,
        sampling=kwargs.get("sampling"),
        significance=SIGNIFICANCE,
    )
    assert certificate.passed, certificate.tests
    assert all(tv <= DETECTABLE_TV + 1e-9 for tv in certificate.detectable_tv.values())


@pytest.mark.slow
@pytest.mark.parametrize("name", BROKEN)
def test_statistical_certificate_fails_the_broken_variants(peaked_pair, name):
    target, draft = peaked_pair
    generate = tree_generator(target, draft, [0], (2,), **BROKEN[name](draft, SamplingParams()))
    certificate = statistical_certificate(
        generate, target, [0], 1, RUNS, seed=11, significance=SIGNIFICANCE
    )
    assert all(test.rejected for test in certificate.tests.values()), certificate.tests
