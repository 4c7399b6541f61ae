"""Per-seed identity of sampled coupled decoding on the transformers backend.

Block rows differ from target-only decoding's rows by rounding (within the stated tolerance);
the coupled step settles every row whose noisy choice could flip within that tolerance with the
backend's ``exact_dist`` (:mod:`spec_decode.core.near_ties`), so coupled speculative output at
T = 0.7 equals target-only output for each seed, chains and trees alike, and the backend counts
the rows it settled. A large stated tolerance makes the check trigger often.
"""

from __future__ import annotations

from copy import deepcopy

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from spec_decode import SamplingParams, generate_autoregressive, generate_speculative  # noqa: E402
from spec_decode.backends.transformers import BLOCK_TOLERANCE, TransformersModel  # noqa: E402
from spec_decode.backends.transformers.cpu_linear import pack_linears  # noqa: E402
from spec_decode.core.coupled import coupled_rule, coupled_tree_rule  # noqa: E402
from spec_decode.core.noise import positional_source  # noqa: E402
from spec_decode.drafting.speculative import generate_tree  # noqa: E402

#: Slow: torch and tiny transformers models.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

VOCAB, N_TOKENS, K, SEEDS = 16, 16, 3, range(4)
SAMPLING = SamplingParams(0.7, top_p=0.95)
PROMPT = [1, 2, 3, 1, 2]


@pytest.fixture(scope="module")
def net(tiny_qwen2):
    return tiny_qwen2(VOCAB, seed=0, logit_scale=4.0)


@pytest.fixture(scope="module")
def draft(net):
    return TransformersModel(pack_linears(deepcopy(net), "int8"))


def target_only(net, seed: int) -> list[int]:
    target = TransformersModel(pack_linears(deepcopy(net), "fp16"))
    trace = generate_autoregressive(
        target, PROMPT, N_TOKENS, positional_source(seed), sampling=SAMPLING
    )
    assert target.stats.settled_rows == 0  # target-only decoding settles nothing
    return trace.tokens


@pytest.mark.parametrize("shape", ["chain", "tree"])
@pytest.mark.parametrize("tolerance", [BLOCK_TOLERANCE, 0.3])
def test_coupled_sampled_output_is_target_only_output(net, draft, shape, tolerance):
    target = TransformersModel(pack_linears(deepcopy(net), "fp16"), block_tolerance=tolerance)
    for seed in SEEDS:
        target.reset()
        draft.reset()
        if shape == "chain":
            trace = generate_speculative(
                target, draft, PROMPT, N_TOKENS, K, positional_source(seed),
                sampling=SAMPLING, rule=coupled_rule,
            )  # fmt: skip
        else:
            trace = generate_tree(
                target, draft, PROMPT, N_TOKENS, (2, 2), positional_source(seed),
                sampling=SAMPLING, rule=coupled_tree_rule,
            )  # fmt: skip
        assert trace.tokens == target_only(net, seed), seed
    stats = target.stats
    print(f"{shape}, tolerance {tolerance}: settled {stats.settled_rows} rows, "
          f"re-scored {stats.rescored_rows}, of {stats.tokens_fed} fed")  # fmt: skip
    if tolerance > BLOCK_TOLERANCE:  # the check triggered, and was counted
        assert stats.settled_rows > 0
        assert stats.rescore_calls >= stats.rescored_rows > 0


def test_without_a_stated_tolerance_nothing_is_settled(net, draft):
    target = TransformersModel(pack_linears(deepcopy(net), "fp16"), exact_ties=False)
    assert target.block_tolerance is None
    generate_speculative(
        target, draft, PROMPT, N_TOKENS, K, positional_source(0), sampling=SAMPLING,
        rule=coupled_rule,
    )  # fmt: skip
    assert target.stats.settled_rows == 0 and target.stats.rescored_rows == 0
    assert np.isfinite(target.stats.forward_s)
