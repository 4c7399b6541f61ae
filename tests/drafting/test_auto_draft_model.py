"""The auto planner's draft-model option: never chosen where it cannot pay, drafting long where
it is nearly free, and priced with the reading of what it has not read yet."""

from __future__ import annotations

from auto_helpers import CPU, FLAT, FRESH, history, planner

from spec_decode import Trace, random_markov
from spec_decode.core.models import Model
from spec_decode.drafting.auto import AutoPlanner, draft_model_can_pay
from spec_decode.drafting.drafters import ModelDrafter


def test_on_this_cpu_the_draft_model_never_pays():
    auto = planner(CPU, random_markov(8, seed=0))
    perfect = history(*[("draft", 4, 4)] * 30)  # even after 120 of 120 drafts accepted
    assert auto.plan(FRESH, perfect, 16)[:2] == ("", 0)
    assert auto.plan(FRESH, Trace(), 16)[:2] == ("", 0)


def test_a_draft_model_that_cannot_pay_is_known_before_loading_it():
    assert not draft_model_can_pay(CPU, CPU.draft_seconds, k_max=16)
    assert draft_model_can_pay(CPU, 0.0005, k_max=16)  # nearly free: k = 1 pays at acceptance 1
    assert draft_model_can_pay(FLAT, FLAT.draft_seconds, k_max=1)
    assert not draft_model_can_pay(FLAT, 0.1, k_max=16)  # ten target passes a draft token


def test_on_a_flat_curve_the_draft_model_drafts_long():
    auto = planner(FLAT, random_markov(8, seed=0), k_max=8)
    assert auto.plan(FRESH, history(*[("draft", 8, 8)] * 10), 16)[:2] == ("draft", 8)
    assert auto.plan(FRESH, history(("", 0, 0)), 16).drafter == "draft"
    # the first step reads the prompt alone: its token streams as soon as target-only's would
    assert auto.plan(FRESH, Trace(), 16)[:2] == ("", 0)


class Caching:
    """A draft model whose cache holds ``cached``."""

    def __init__(self, model: Model, cached: list[int]) -> None:
        self.model, self.cached = model, cached
        self.vocab_size = model.vocab_size

    def unread(self, sequence):
        return len(sequence) - len(self.cached)  # ``cached`` is a prefix of it here

    def next_dist(self, prefix):
        return self.model.next_dist(prefix)


def test_a_draft_model_that_has_not_read_the_context_prices_reading_it():
    """Chosen only when first chosen, a draft reads the whole prompt then: not free."""
    context = [i % 64 for i in range(2000)]  # 0.12 s for this draft on the FLAT curve
    proven = history(*[("draft", 8, 8)] * 10)
    for cached, chosen in (([], ""), (context[:-3], "draft")):
        draft = ModelDrafter(Caching(random_markov(64, seed=0), cached))
        auto = AutoPlanner(FLAT, {"draft": draft}, "draft", k_max=8)
        assert auto.plan(context, proven, 16).drafter == chosen
