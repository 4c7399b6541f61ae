"""Token trees: several drafted continuations below one prefix, and their scoring by the target.

A tree step drafts a tree instead of a chain: ``widths = (3, 2, 1)`` asks for 3 candidates after
the prefix, 2 after each of those and 1 after each of those (15 drafted tokens, depth 3). The
target scores every node in ONE pass (:func:`score_tree`), and verification walks down the tree
keeping at most one path, so a step still emits between 1 and depth + 1 tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from spec_decode.core.distributions import check_distributions
from spec_decode.core.models import Model

#: The parent index of the root's children: the root is the committed prefix, not a node.
ROOT = -1


@dataclass(frozen=True)
class TreeShape:
    """How many candidates to draft below every node, depth by depth.

    ``widths[d]`` is the number of children each node at depth d gets (depth 0 is the prefix).
    A chain of k tokens is the shape ``(1,) * k``.
    """

    widths: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.widths:
            raise ValueError("a tree shape needs at least one width")
        if any(not isinstance(w, int | np.integer) or w < 1 for w in self.widths):
            raise ValueError(f"tree widths must be integers >= 1, got {self.widths}")

    @classmethod
    def parse(cls, text: str) -> TreeShape:
        """The shape written as comma-separated widths, e.g. ``"3,2,1"``."""
        try:
            widths = tuple(int(part) for part in text.split(","))
        except ValueError as error:
            raise ValueError(
                f"tree widths must be comma-separated integers like 3,2,1; got {text!r}"
            ) from error
        return cls(widths)

    @property
    def depth(self) -> int:
        """The longest drafted path: a step emits at most depth + 1 tokens."""
        return len(self.widths)

    @property
    def nodes(self) -> int:
        """Drafted tokens of the full tree: w0 + w0 w1 + ... + w0 ... w(D-1)."""
        return int(np.cumprod(self.widths).sum())

    @property
    def expansions(self) -> int:
        """Positions whose children are drafted (the prefix and every non-leaf node) in the full
        tree: one draft-model evaluation each, shared by the siblings drawn from it."""
        return 1 + int(np.cumprod(self.widths[:-1]).sum())

    def __str__(self) -> str:
        return ",".join(str(w) for w in self.widths)


@dataclass(frozen=True, eq=False)
class TokenTree:
    """Drafted tokens below the committed prefix, nodes in breadth-first order.

    Parameters
    ----------
    tokens
        ``tokens[i]`` is node i's token.
    parents
        ``parents[i]`` is the index of node i's parent, :data:`ROOT` for a child of the prefix.
        Every parent comes before its children and parents never decrease, so siblings are
        contiguous and the nodes are in breadth-first order.
    q
        Shape (len(tokens), V): ``q[i]`` is the distribution node i's token was drawn from, given
        its path and, when siblings are drawn without replacement, its earlier siblings. Exact
        verification needs exactly this row, see :mod:`spec_decode.core.tree_rules`.
    """

    tokens: tuple[int, ...]
    parents: tuple[int, ...]
    q: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if len(self.parents) != n:
            raise ValueError(f"tree has {n} tokens but {len(self.parents)} parent indices")
        if any(not ROOT <= parent < i for i, parent in enumerate(self.parents)):
            raise ValueError(f"every parent must come before its child: parents {self.parents}")
        if any(b < a for a, b in zip(self.parents, self.parents[1:], strict=False)):
            raise ValueError(f"nodes must be in breadth-first order: parents {self.parents}")
        if np.ndim(self.q) != 2 or np.shape(self.q)[0] != n:
            raise ValueError(f"tree q has shape {np.shape(self.q)}; expected ({n}, V)")
        vocab_size = np.shape(self.q)[1]
        if any(not 0 <= t < vocab_size for t in self.tokens):
            raise ValueError(f"tree tokens must lie in [0, {vocab_size}), got {self.tokens}")
        q = check_distributions(self.q, vocab_size, "tree q")
        if np.any(q[np.arange(n), list(self.tokens)] <= 0):
            raise ValueError("tree has a token its own q gives probability 0")

    @classmethod
    def empty(cls, vocab_size: int) -> TokenTree:
        """No drafts at all: a step with this tree is one plain target step."""
        return cls((), (), np.empty((0, vocab_size)))

    @property
    def size(self) -> int:
        """Drafted tokens (nodes)."""
        return len(self.tokens)

    @property
    def vocab_size(self) -> int:
        return int(self.q.shape[1])

    @cached_property
    def depths(self) -> tuple[int, ...]:
        """Depth of every node (the root's children have depth 1)."""
        depths: list[int] = []
        for parent in self.parents:
            depths.append(1 if parent == ROOT else depths[parent] + 1)
        return tuple(depths)

    @property
    def depth(self) -> int:
        """Length of the longest drafted path (0 for the empty tree)."""
        return max(self.depths, default=0)

    @property
    def expansions(self) -> int:
        """Positions whose children were drafted: one draft-model evaluation each."""
        return len(set(self.parents))

    def children(self, node: int) -> range:
        """Indices of ``node``'s children in drawing order (``ROOT``: the prefix's children)."""
        return self._children.get(node, range(0))

    @cached_property
    def _children(self) -> dict[int, range]:
        spans: dict[int, range] = {}
        for i, parent in enumerate(self.parents):
            start = spans[parent].start if parent in spans else i
            spans[parent] = range(start, i + 1)
        return spans

    def path(self, node: int) -> list[int]:
        """Tokens from the prefix down to ``node``, inclusive."""
        tokens: list[int] = []
        while node != ROOT:
            tokens.append(self.tokens[node])
            node = self.parents[node]
        return tokens[::-1]

    def kept(self, emitted: Sequence[int]) -> int:
        """How many leading ``emitted`` tokens follow a path of the tree: the drafts kept."""
        frontier, kept = [ROOT], 0
        for token in emitted:
            frontier = [
                child
                for node in frontier
                for child in self.children(node)
                if self.tokens[child] == token
            ]
            if not frontier:
                break
            kept += 1
        return kept


def score_tree(model: Model, prefix: Sequence[int], tree: TokenTree) -> np.ndarray:
    """Target distributions at the prefix and after every node: shape (tree.size + 1, V).

    Row 0 follows ``prefix``; row i + 1 follows ``prefix + tree.path(i)``. Uses the model's own
    ``score_tree(prefix, tokens, parents)`` when it has one (one forward pass with a tree
    attention mask); otherwise calls ``next_dist`` once per row. Either way the sampler counts ONE
    target pass.
    """
    tree_scorer = getattr(model, "score_tree", None)
    if tree_scorer is not None:
        rows = tree_scorer(prefix, list(tree.tokens), list(tree.parents))
        return np.asarray(rows, dtype=np.float64)
    context = list(prefix)
    rows = [model.next_dist(context)]
    rows.extend(model.next_dist(context + tree.path(i)) for i in range(tree.size))
    return np.stack(rows).astype(np.float64, copy=False)
