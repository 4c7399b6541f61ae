"""The shipped int8-draft path, certified by exhaustive enumeration.

``spec-decode generate --backend transformers`` loads the draft with int8 linear layers by
default. Their activation scale is shared by the rows of a call, so the draft's q depends on how
its tokens were split into calls, and a KV cache surviving from one enumerated path to the next
changes q along later paths: the enumeration is then not a function of its choices. Resetting
both models before every path (``reset=``) makes each path start from the state a fresh run
starts from. The enumeration checks itself (replay determinism, total probability 1 within
1e-12; a path never visited loses its mass from the total), so the broken variant, without the
reset, raises instead of passing silently.

Models are loaded from saved folders the way ``generate`` loads them (``loading.load``), with a
4-token vocabulary so that every 3-token output can be enumerated.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from spec_decode.backends.loading import load  # noqa: E402
from spec_decode.backends.transformers.cpu_linear import PackedLinear  # noqa: E402
from spec_decode.certify.enumeration import EnumerationError, enumerate_outputs  # noqa: E402
from spec_decode.certify.generators import chain_generator  # noqa: E402
from spec_decode.certify.reference import target_joint  # noqa: E402
from spec_decode.certify.zoo.rules import resample_from_target  # noqa: E402

#: Slow: torch and tiny transformers models.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

VOCAB, PREFIX, N_TOKENS, K = 4, [1, 2], 3, 2
#: Speculative rows are the fp32 target's block rows, which differ from target-only decoding's
#: rows by float rounding (~1e-7 relative); 9e-9 was measured.
TV_TOLERANCE = 1e-6


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_qwen2_folder):
    root = tmp_path_factory.mktemp("enumeration")
    return (
        tiny_qwen2_folder(root / "target", seed=0, vocab=VOCAB),
        tiny_qwen2_folder(root / "draft", seed=2, vocab=VOCAB),
    )


def load_pair(folders):
    """A fresh fp32 target and the default int8 draft, as ``generate`` loads them."""
    target = load("transformers", str(folders[0]), weights="fp32").model
    draft = load("transformers", str(folders[1]), weights="int8").model
    assert isinstance(draft.model.lm_head, PackedLinear)
    assert draft.model.lm_head.weight_format == "int8"
    return target, draft


def enumerate_pair(target, draft, reset: bool, **options):
    generate = chain_generator(target, draft, PREFIX, K, **options)

    def reset_both() -> None:
        target.reset()
        draft.reset()

    return enumerate_outputs(
        lambda source: generate(source, N_TOKENS), reset=reset_both if reset else None
    )


def joint_of(enumeration) -> np.ndarray:
    joint = np.zeros((VOCAB,) * N_TOKENS)
    for tokens, probability in enumeration.distribution.items():
        joint[tokens] += probability
    return joint


@pytest.fixture(scope="module")
def target_only_joint(folders):
    """The exact joint of target-only sampling: each row computed as target-only decoding
    computes it, from an empty cache (the prompt in one call, then one token per call)."""
    model = load("transformers", str(folders[0]), weights="fp32").model

    def row(context: list[int]) -> np.ndarray:
        model.reset()
        probabilities = model.next_dist(PREFIX)
        for end in range(len(PREFIX) + 1, len(context) + 1):
            probabilities = model.next_dist(context[:end])
        return probabilities

    return target_joint(row, VOCAB, PREFIX, N_TOKENS)


@pytest.fixture(scope="module")
def with_reset(folders):
    return enumerate_pair(*load_pair(folders), reset=True)


def test_reset_per_path_enumerates_every_path_with_total_probability_one(folders, with_reset):
    assert abs(with_reset.total_probability - 1) < 1e-12  # 1.000000000000000 measured
    # every output is reached (no path lost), and a second enumeration on freshly loaded
    # models visits the same paths with the same probabilities, bit for bit
    assert set(with_reset.distribution) == set(itertools.product(range(VOCAB), repeat=N_TOKENS))
    again = enumerate_pair(*load_pair(folders), reset=True)
    assert again.paths == with_reset.paths  # 640 measured
    assert again.distribution == with_reset.distribution


def test_enumerated_output_matches_target_only_sampling(with_reset, target_only_joint):
    tv = 0.5 * float(np.abs(joint_of(with_reset) - target_only_joint).sum())
    assert tv < TV_TOLERANCE, tv


def test_the_same_certificate_fails_a_broken_rule(folders, target_only_joint):
    broken = enumerate_pair(*load_pair(folders), reset=True, rule=resample_from_target)
    tv = 0.5 * float(np.abs(joint_of(broken) - target_only_joint).sum())
    assert tv > 1000 * TV_TOLERANCE, tv


def test_without_reset_the_self_check_raises(folders):
    """The broken variant: caches surviving from path to path, from freshly loaded models."""
    with pytest.raises(EnumerationError, match="replay is not deterministic"):
        enumerate_pair(*load_pair(folders), reset=False)
    # with the checks switched off it would have returned a distribution that is not one
    target, draft = load_pair(folders)
    generate = chain_generator(target, draft, PREFIX, K)
    unchecked = enumerate_outputs(
        lambda source: generate(source, N_TOKENS), total_tolerance=1.0, replay_tolerance=1.0
    )
    assert abs(unchecked.total_probability - 1) > 1e-9, unchecked.total_probability
