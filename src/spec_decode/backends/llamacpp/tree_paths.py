"""Which sequences a token tree's nodes belong to, so that one llama.cpp call scores every
root-to-leaf path as a plain sequence sharing the cached prefix
(:meth:`.model.LlamaCppModel.score_tree`)."""

from __future__ import annotations

from collections.abc import Sequence


def path_sequences(parents: Sequence[int]) -> tuple[list[tuple[int, ...]], list[int]]:
    """For a breadth-first tree: each node's sequence ids (1 + the index of every leaf below it,
    ascending) and its depth (1 for a child of the prefix)."""
    depths: list[int] = []
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(f"node {i}'s parent {parent} is not an earlier node or -1")
        depths.append(1 if parent < 0 else depths[parent] + 1)
    has_child = {parent for parent in parents if parent >= 0}
    seqs: list[set[int]] = [set() for _ in parents]
    leaves = [i for i in range(len(parents)) if i not in has_child]
    for seq, leaf in enumerate(leaves, start=1):
        node = leaf
        while node >= 0:
            seqs[node].add(seq)
            node = parents[node]
    return [tuple(sorted(s)) for s in seqs], depths
