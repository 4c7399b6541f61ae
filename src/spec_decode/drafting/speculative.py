"""Speculative generation with the default drafters built for you: :func:`generate_speculative`
(a :class:`~spec_decode.drafting.drafters.ModelDrafter` on the draft model, k tokens a step) and
:func:`generate_tree` (a :class:`~spec_decode.drafting.tree_drafters.ModelTreeDrafter`).

Both only build the step and call the one loop, :func:`spec_decode.core.generate.generate`; they
live here rather than in core because they construct drafters, which core knows only by their
interface.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import numpy as np

from spec_decode.core.coupled import is_coupled
from spec_decode.core.generate import TokenCallback, generate
from spec_decode.core.models import Model
from spec_decode.core.noise import positional_source
from spec_decode.core.protocols import Drafter, KPolicy, TreeDrafter
from spec_decode.core.randomness import RandomSource
from spec_decode.core.rules import Rule, exact_rule
from spec_decode.core.sampling import SamplingParams
from spec_decode.core.steps import chain_step, tree_step
from spec_decode.core.trace import Trace
from spec_decode.core.tree import TreeShape
from spec_decode.core.tree_rules import TreeRule, verify_tree
from spec_decode.drafting.drafters import ModelDrafter
from spec_decode.drafting.policies import as_policy
from spec_decode.drafting.tree_drafters import ModelTreeDrafter


def generate_speculative(
    target: Model,
    draft: Model | None,
    prefix: Sequence[int],
    n_tokens: int,
    k: int | KPolicy,
    rng: np.random.Generator | RandomSource,
    *,
    sampling: SamplingParams | None = None,
    rule: Rule = exact_rule,
    drafter: Drafter | None = None,
    on_tokens: TokenCallback | None = None,
    stop_tokens: Collection[int] = (),
) -> Trace:
    """Emit ``n_tokens`` tokens after ``prefix`` by speculative decoding.

    Parameters
    ----------
    target, draft
        The target model and the draft model; give ``draft`` or ``drafter``, not both.
    prefix
        The prompt: at least one token id.
    n_tokens
        How many tokens to emit; the last step drafts at most what is still needed.
    k
        The most tokens drafted per step (k >= 1), or a
        :class:`~spec_decode.core.protocols.KPolicy` that chooses it (k >= 0; 0 is a plain
        target pass) before each step from the trace so far.
    rng
        A numpy ``Generator`` or a :class:`~spec_decode.core.randomness.RandomSource`.
    sampling
        Controls applied to both models' distributions; the output is distributed as sampling from
        the target under these controls (token-identical to greedy decoding at temperature 0).
    rule
        The verification rule; :func:`~spec_decode.core.rules.exact_rule` by default. The
        coupled rule (:data:`~spec_decode.core.coupled.coupled_rule`) turns ``rng`` into
        positional noise (:func:`~spec_decode.core.noise.positional_source`: a seeded generator
        contributes its seed) and emits exactly the tokens of target-only decoding with that
        noise.
    drafter
        Proposes the drafts; by default a :class:`~spec_decode.drafting.drafters.ModelDrafter`
        on ``draft`` (drawing with the positional noise under the coupled rule).
    on_tokens
        Called with each step's emitted tokens, in order.
    stop_tokens
        End early, right after emitting any of these (such as end-of-sequence); the stop token is
        the last one returned and nothing after it is emitted.
    """
    sampling = sampling or SamplingParams()
    coupled = is_coupled(rule)
    drafter = drafter or ModelDrafter(_required(draft), sampling, coupled=coupled)
    step = chain_step(target, drafter, as_policy(k), rule, sampling)
    rng = positional_source(rng) if coupled else rng
    return generate(
        target, step, prefix, n_tokens, rng, on_tokens=on_tokens, stop_tokens=stop_tokens
    )


def generate_tree(
    target: Model,
    draft: Model | None,
    prefix: Sequence[int],
    n_tokens: int,
    widths: Sequence[int] | TreeShape,
    rng: np.random.Generator | RandomSource,
    *,
    sampling: SamplingParams | None = None,
    replacement: bool = True,
    rule: TreeRule = verify_tree,
    drafter: TreeDrafter | None = None,
    on_tokens: TokenCallback | None = None,
    stop_tokens: Collection[int] = (),
) -> Trace:
    """Emit ``n_tokens`` tokens after ``prefix`` by tree speculative decoding.

    ``widths`` is the tree shape, e.g. ``(3, 2, 1)``: children per node, depth by depth (see
    :class:`~spec_decode.core.tree.TreeShape`). A step emits at most depth + 1 tokens, so when
    fewer are still needed it drafts only the first ``remaining - 1`` depths. ``replacement``
    says whether the default :class:`~spec_decode.drafting.tree_drafters.ModelTreeDrafter` on
    ``draft`` draws siblings with replacement (i.i.d.) or without (under the coupled tree rule:
    the top of the draft's race); a given ``drafter`` is used as it is. ``rule`` is the tree
    verification rule (:func:`~spec_decode.core.tree_rules.verify_tree` by default, or
    :data:`~spec_decode.core.coupled.coupled_tree_rule`); the other parameters are as in
    :func:`generate_speculative`.
    """
    sampling = sampling or SamplingParams()
    shape = widths if isinstance(widths, TreeShape) else TreeShape(tuple(widths))
    coupled = is_coupled(rule)
    drafter = drafter or ModelTreeDrafter(_required(draft), sampling, replacement, coupled)
    step = tree_step(target, drafter, shape, rule, sampling)
    rng = positional_source(rng) if coupled else rng
    return generate(
        target, step, prefix, n_tokens, rng, on_tokens=on_tokens, stop_tokens=stop_tokens
    )


def _required(draft: Model | None) -> Model:
    """The draft model, needed when no drafter is given."""
    if draft is None:
        raise ValueError("give a draft model or a drafter")
    return draft
