"""Shared toy model pairs for the tests."""

from __future__ import annotations

import pytest

from spec_decode import draft_from_target, random_markov


@pytest.fixture
def pair32():
    """A 32-token order-1 target and an 0.8-agreement draft."""
    target = random_markov(32, seed=1)
    return target, draft_from_target(target, 0.8, seed=2)


@pytest.fixture
def small_pair():
    """A 4-token target and a poorly matched draft, so rejections are frequent."""
    target = random_markov(4, seed=1)
    return target, draft_from_target(target, 0.3, seed=2)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny transformers models run fastest on one torch thread; restore the setting afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
