"""Tree speculative generation: draft a token tree, score it in one target pass, verify it.

One tree step: the tree drafter proposes a tree of the requested shape, the target scores the
prefix and every node in ONE pass (:func:`spec_decode.tree.score_tree`), and the tree rule walks
down it, keeping at most one path. The trace counts what a step costs: one target pass, and one
draft call per position whose children were drafted (the prefix and every non-leaf node), since
siblings are drawn from one shared draft distribution. For a chain that is one call per drafted
token, as in :class:`~spec_decode.speculative.Trace`.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np

from spec_decode.distributions import check_distributions
from spec_decode.models import Model
from spec_decode.randomness import RandomSource
from spec_decode.sampling import SamplingParams
from spec_decode.speculative import (
    TokenCallback,
    Trace,
    _check_emitted,
    start_generation,
    stop_early,
)
from spec_decode.tree import TokenTree, TreeShape, score_tree
from spec_decode.tree_drafters import ModelTreeDrafter, TreeDrafter
from spec_decode.tree_rules import TreeRule, verify_tree


@dataclass(frozen=True)
class TreeStepResult:
    """One tree step: the drafted tree, the emitted tokens, and the time each part took."""

    tree: TokenTree
    emitted: list[int]
    draft_seconds: float = 0.0
    target_seconds: float = 0.0


@dataclass
class TreeTrace(Trace):
    """A :class:`~spec_decode.speculative.Trace` of tree steps.

    ``drafted_lengths`` holds each step's tree size (drafted tokens), ``accepted_lengths`` the
    drafts it kept (the accepted path's length), so ``acceptance_rate`` is kept / drafted tokens
    and is naturally low for wide trees. ``expansions`` holds each step's draft calls.
    """

    expansions: list[int] = field(default_factory=list)

    @property
    def draft_calls(self) -> int:
        """Draft forward calls: one per position whose children were drafted, over all steps."""
        return sum(self.expansions)

    def record_tree(self, step: TreeStepResult) -> None:
        """Add one tree step's outcome."""
        self.drafted_lengths.append(step.tree.size)
        self.accepted_lengths.append(step.tree.kept(step.emitted))
        self.expansions.append(step.tree.expansions)
        self.tokens.extend(step.emitted)
        self.draft_seconds += step.draft_seconds
        self.target_seconds += step.target_seconds


def _check_tree(tree: object, max_depth: int, vocab_size: int) -> TokenTree:
    if not isinstance(tree, TokenTree):
        raise ValueError(f"tree drafter must return a TokenTree, got {type(tree).__name__}")
    if tree.vocab_size != vocab_size:
        raise ValueError(f"drafted tree's q has vocabulary {tree.vocab_size}, not {vocab_size}")
    if tree.depth > max_depth:
        raise ValueError(f"drafter proposed a tree of depth {tree.depth}, deeper than {max_depth}")
    return tree


def tree_step(
    target: Model,
    drafter: TreeDrafter,
    prefix: list[int],
    shape: TreeShape | None,
    rule: TreeRule,
    source: RandomSource,
    sampling: SamplingParams,
) -> TreeStepResult:
    """One draft-verify step after ``prefix``; ``shape`` None drafts nothing (a plain step)."""
    vocab_size = target.vocab_size
    start = time.perf_counter()
    if shape is None:
        tree = TokenTree.empty(vocab_size)
    else:
        tree = _check_tree(drafter.propose_tree(prefix, shape, source), shape.depth, vocab_size)
    drafted_at = time.perf_counter()
    raw_p = check_distributions(score_tree(target, prefix, tree), vocab_size, "target distribution")
    scored_at = time.perf_counter()
    if raw_p.shape != (tree.size + 1, vocab_size):
        raise ValueError(
            f"target tree score has shape {raw_p.shape}, expected {(tree.size + 1, vocab_size)}"
        )
    emitted = _check_emitted(rule(sampling.warp(raw_p), tree, source), tree.depth, vocab_size)
    return TreeStepResult(tree, emitted, drafted_at - start, scored_at - drafted_at)


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
) -> TreeTrace:
    """Emit ``n_tokens`` tokens after ``prefix`` by tree speculative decoding.

    Parameters
    ----------
    target, draft
        The target model and the draft model; ``draft`` may be ``None`` when ``drafter`` is given.
    prefix
        The prompt: at least one token id.
    n_tokens
        How many tokens to emit. A step emits at most depth + 1 tokens, so when fewer are still
        needed the step drafts only the first ``remaining - 1`` depths of the shape.
    widths
        The tree shape, e.g. ``(3, 2, 1)``: children per node, depth by depth (see
        :class:`~spec_decode.tree.TreeShape`).
    rng
        A numpy ``Generator`` or a :class:`~spec_decode.randomness.RandomSource`.
    sampling
        Controls applied to both models' distributions; the output is distributed as sampling from
        the target under these controls.
    replacement
        Whether the default drafter draws siblings with replacement (i.i.d.) or without.
    rule
        The tree verification rule; :func:`~spec_decode.tree_rules.verify_tree` by default.
    drafter
        Proposes the trees; by default a :class:`~spec_decode.tree_drafters.ModelTreeDrafter`.
    on_tokens
        Called with each step's emitted tokens, in order.
    stop_tokens
        End early, right after emitting any of these (such as end-of-sequence).
    """
    sampling = sampling or SamplingParams()
    shape = widths if isinstance(widths, TreeShape) else TreeShape(tuple(widths))
    if drafter is None:
        if draft is None:
            raise ValueError("give a draft model or a tree drafter")
        drafter = ModelTreeDrafter(draft, sampling, replacement)
    context, source = start_generation(target, drafter, prefix, n_tokens, rng)
    trace = TreeTrace()
    while len(trace.tokens) < n_tokens:
        depth = min(shape.depth, n_tokens - len(trace.tokens) - 1)  # no overshoot
        step_shape = TreeShape(shape.widths[:depth]) if depth else None
        step = stop_early(
            tree_step(target, drafter, context, step_shape, rule, source, sampling), stop_tokens
        )
        trace.record_tree(step)
        context.extend(step.emitted)
        if on_tokens is not None:
            on_tokens(step.emitted)
        if step.emitted[-1] in stop_tokens:
            break
    return trace
