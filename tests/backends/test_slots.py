"""Several requests decoded together stay what each computes alone (:mod:`.slots`).

On the exact-rows build, with a tiny K-quant GGUF laid out like the packaged target:

- rows of a sequence fed in calls shared with other sequences' rows (prompt chunks, blocks of
  any size, in any order, rejected tails dropped or not) are bitwise its rows fed alone, with
  cells of its own and in one unified cache (where the build keeps each sequence's cells in
  order and its flash attention computes each row as alone);
- the negative control: in a unified cache without that attention the same schedule gives other
  rows (other sequences' cells interleave with its own and change the order of attention's sums);
- requests run on threads, posting to a :class:`Batcher` stepped by one thread, with random
  arrival times, give each its solo output: greedy, speculative greedy, and seeded T = 0.7
  under the coupled rule;
- a slot that copies another slot's cells for a prefix (:meth:`LlamaCppModel.adopt`) scores
  the rest bitwise as a model that read it all, even where the donor's cells change before the
  copy's data moves; the negative control: cells that are not the prefix claimed give other rows.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from exact_rows_mark import needs_exact_rows
from kquant_gguf import VOCAB, write_kquant_gguf

from spec_decode import SamplingParams, generate_autoregressive
from spec_decode.backends.llamacpp import LlamaCppModel
from spec_decode.backends.llamacpp.call_plan import plan_call
from spec_decode.backends.llamacpp.context import LlamaContext, NoRoom, Row
from spec_decode.backends.llamacpp.exact_rows import shared_call_mismatches
from spec_decode.backends.llamacpp.slots import Batcher, open_slots
from spec_decode.core.coupled import coupled_rule
from spec_decode.core.noise import SeededNoise
from spec_decode.drafting.speculative import generate_speculative

pytestmark = needs_exact_rows("the loaded llama.cpp is not the exact-rows build")
WINDOW = 256


@pytest.fixture(scope="module")
def gguf(tmp_path_factory) -> Path:
    return write_kquant_gguf(tmp_path_factory.mktemp("slots") / "kquant.gguf")


def streams_of(seed: int) -> list[list[int]]:
    rng = np.random.default_rng(100 + seed)
    return [rng.integers(3, VOCAB, size=int(rng.integers(40, 120))).tolist() for _ in "abc"]


@pytest.mark.parametrize(
    ("unified", "drops", "seed"),
    [(False, False, 0), (False, True, 1), (True, False, 0), (True, True, 1)],
)
def test_shared_calls_give_each_sequence_its_solo_rows(gguf, unified, drops, seed):
    """Three streams share calls of 0 to 24 tokens each (prompt chunks and blocks alike, in a
    random order of sequences), with cells of their own or in one unified cache, rejected tails
    dropped after each call or not: every row is bitwise the stream's row alone."""
    differing = shared_call_mismatches(
        gguf, streams_of(seed), seed, unified=unified, drop_tails=drops
    )
    assert not any(differing), [len(d) for d in differing]


def test_a_unified_cache_without_row_by_row_attention_gives_other_rows(gguf):
    """The negative control: the check can fail, and does where attention sums over every cell
    of a unified cache (flash attention off) rather than visiting a row's own cells in order."""
    assert any(shared_call_mismatches(gguf, streams_of(0), 0, unified=True, flash_attention=False))


def run_together(batchers: Sequence[Batcher], jobs: Sequence[Callable[[], object]], seed: int):
    """Run ``jobs`` on threads of their own, each starting after a random delay, while this
    thread steps the batchers (as the server's engine thread does); their results."""
    delays = np.random.default_rng(seed).uniform(0, 0.05, size=len(jobs))

    def delayed(job, delay):
        time.sleep(delay)
        with batchers[0].member():  # as the engine runs a request
            return job()

    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [pool.submit(delayed, job, d) for job, d in zip(jobs, delays, strict=True)]
        while not all(f.done() for f in futures):
            if not any([batcher.step() for batcher in batchers]):
                batchers[0].wait(0.005)
        return [f.result() for f in futures]


PROMPTS = [[5, 9, 13], [200, 7, 300, 41, 8], [77] * 12, list(range(20, 60))]


@pytest.fixture(scope="module")
def pools(gguf):
    """Slots whose calls hold 8 tokens while one decodes: prompts of 12 and 40 tokens are read
    in chunks or whole as arrivals fall (:func:`plan_call`)."""
    targets, target_batcher = open_slots(gguf, len(PROMPTS), n_threads=2, n_ctx=WINDOW, budget=8)
    drafts, draft_batcher = open_slots(
        gguf, len(PROMPTS), n_threads=2, n_ctx=WINDOW, check_rows=False, budget=8
    )
    return targets, drafts, [target_batcher, draft_batcher]


@pytest.fixture(scope="module")
def solo(gguf):
    return LlamaCppModel(gguf, n_threads=2, n_ctx=WINDOW), LlamaCppModel(gguf, n_ctx=WINDOW)


@pytest.mark.parametrize("seed", [0, 1])
def test_concurrent_greedy_requests_give_their_solo_output(pools, solo, seed):
    targets, drafts, batchers = pools
    greedy = SamplingParams(temperature=0)
    alone = [
        generate_autoregressive(solo[0], p, 60, np.random.default_rng(0), sampling=greedy).tokens
        for p in PROMPTS
    ]
    jobs = []
    for i, prompt in enumerate(PROMPTS):
        target, draft = targets[i], drafts[i]
        k = 4 * i  # one target-only, three speculative with blocks of 5, 9 and 13
        if k == 0:
            jobs.append(lambda t=target, p=prompt: generate_autoregressive(
                t, p, 60, np.random.default_rng(0), sampling=greedy).tokens)  # fmt: skip
        else:
            jobs.append(lambda t=target, d=draft, p=prompt, k=k: generate_speculative(
                t, d, p, 60, k, np.random.default_rng(0), sampling=greedy).tokens)  # fmt: skip
    assert run_together(batchers, jobs, seed) == alone
    assert batchers[0].shared_steps > 0  # requests did share calls


def test_concurrent_seeded_requests_give_target_only_output_under_the_coupled_rule(pools, solo):
    """At T = 0.7, each request drafting 6 tokens a step beside the others emits what
    target-only decoding alone emits for its seed."""
    targets, drafts, batchers = pools
    warm = SamplingParams(0.7)

    def noise(seed: int) -> SeededNoise:
        return SeededNoise(np.random.SeedSequence(seed), "race")

    alone = [
        generate_autoregressive(solo[0], p, 50, noise(seed), sampling=warm).tokens
        for seed, p in enumerate(PROMPTS)
    ]

    def coupled(i: int) -> list[int]:
        return generate_speculative(
            targets[i], drafts[i], PROMPTS[i], 50, 6, noise(i), sampling=warm, rule=coupled_rule
        ).tokens

    jobs = [(lambda i=i: coupled(i)) for i in range(len(PROMPTS))]
    assert run_together(batchers, jobs, 7) == alone


def read_prompt(gguf: Path, members: int, prompt_call: int) -> int:
    """Steps a batcher of budget 16 takes to read a lone prompt of 50 tokens, with ``members``
    requests running (the one posting and ``members - 1`` yet to post)."""
    context = LlamaContext(gguf, n_threads=2, n_ctx=WINDOW, n_seq=2, unified=False)
    batcher = Batcher(context, budget=16, prompt_call=prompt_call)
    batcher._members = members
    result: list[np.ndarray] = []
    rows = [Row(t, i, (0,), i == 49) for i, t in enumerate(range(10, 60))]
    thread = threading.Thread(target=lambda: result.append(batcher.decode(rows)))
    thread.start()
    while thread.is_alive():
        if not batcher.step():
            batcher.wait(0.005)
    thread.join()
    context.close()
    assert result[0].shape == (1, VOCAB)
    return batcher.steps


def test_a_prompt_is_read_whole_while_nobody_decodes_and_in_chunks_while_one_may(gguf):
    assert read_prompt(gguf, members=1, prompt_call=512) == 1
    assert read_prompt(gguf, members=1, prompt_call=20) == 3  # 20 + 20 + 10 rows
    assert read_prompt(gguf, members=2, prompt_call=512) == 4  # 16 + 16 + 16 + 2 rows
    assert read_prompt(gguf, members=0, prompt_call=512) == 4  # a draft's batcher: no members


def test_a_step_feeds_a_row_of_each_block_and_then_the_shortest_prompt_alone(gguf):
    """A second prompt in the call would delay the first one's first token by its own cost, and
    so would a block's drafted rows: they follow in later calls."""
    context = LlamaContext(gguf, n_threads=2, n_ctx=WINDOW, n_seq=3, unified=False)
    batcher = Batcher(context, budget=32)
    calls: list[list[tuple[int, int]]] = []
    decode = context.decode

    def recorded(rows):
        calls.append(sorted(Counter(row.seqs[0] for row in rows).items()))
        return decode(rows)

    context.decode = recorded
    posts = [
        [Row(t, i, (0,), i == 11) for i, t in enumerate(range(10, 22))],  # a prompt of 12
        [Row(t, i, (1,), i == 5) for i, t in enumerate(range(30, 36))],  # a prompt of 6
        [Row(t, i, (2,), True) for i, t in enumerate((40, 41))],  # a block of 2
    ]
    threads = [threading.Thread(target=batcher.decode, args=(rows,)) for rows in posts]
    for thread in threads:
        thread.start()
    while batcher.pending < len(posts):
        time.sleep(0.005)
    while batcher.step():
        pass
    for thread in threads:
        thread.join()
    assert calls == [[(1, 6), (2, 1)], [(0, 12), (2, 1)]]
    context.close()


def test_the_plan_feeds_blocks_then_one_prompt_in_what_the_budget_leaves():
    blocks = [(False, 5), (False, 3)]  # (is a prompt, rows left)
    assert plan_call(blocks, 16, 512, all_posted=True) == [(1, 3), (0, 5)]
    assert plan_call(blocks, 6, 512, all_posted=True) == [(1, 3), (0, 3)]  # a block in parts
    waiting = [(True, 30), *blocks, (True, 12)]  # while a prompt waits, a row of each block
    assert plan_call(waiting, 16, 512, all_posted=True) == [(2, 1), (1, 1), (3, 12)]
    assert plan_call(waiting, 6, 512, all_posted=True) == [(2, 1), (1, 1), (3, 4)]


def test_the_plan_reads_the_shortest_prompt_alone_only_while_nobody_may_decode():
    prompts = [(True, 900), (True, 40)]
    assert plan_call(prompts, 16, 512, all_posted=True) == [(1, 40)]
    assert plan_call([(True, 900)], 16, 512, all_posted=True) == [(0, 512)]
    assert plan_call(prompts, 16, 512, all_posted=False) == [(1, 16)]


@pytest.fixture(scope="module")
def two_slots(gguf):
    models, _ = open_slots(gguf, 2, n_threads=2, n_ctx=WINDOW)
    return models


def test_a_slot_that_copies_another_slots_prefix_scores_as_if_it_read_it(two_slots, solo):
    """A slot holding another slot's cells for a prompt's first 60 tokens (copied, not read)
    gives the rows of the prompt's rest bitwise as a model that read it all, though the donor
    went on to other tokens before the next decode; where the donor's cells are not the prefix
    claimed (the negative control), the rows differ."""
    donor, taker = two_slots
    rng = np.random.default_rng(5)
    prompt = rng.integers(3, VOCAB, size=80).tolist()
    donor.reset()
    donor.next_dist(prompt[:70])  # the donor's cache: the first 70 tokens
    taker.next_dist(rng.integers(3, VOCAB, size=30).tolist())  # cells of its own, replaced
    assert taker.adopt(donor, prompt[:60]) == 60
    assert taker.unread(prompt) == 20
    donor.reset()  # the donor's cells change before the copy's data moves (at the next decode)
    donor.next_dist(rng.integers(3, VOCAB, size=90).tolist())
    alone = solo[0].score(prompt[:75], prompt[75:])
    assert np.array_equal(taker.score(prompt[:75], prompt[75:]), alone)

    donor.reset()
    donor.next_dist(prompt[:70])
    other = [*prompt[:30], *((t % (VOCAB - 3)) + 3 for t in np.array(prompt[30:60]) + 1)]
    assert taker.adopt(donor, other + prompt[60:]) == 70  # claims tokens the donor lacks
    wrong = taker.score([*other, *prompt[60:75]], prompt[75:])
    right = solo[0].score([*other, *prompt[60:75]], prompt[75:])
    assert not np.array_equal(wrong, right)


def test_a_copy_holds_no_more_than_the_donor_has(two_slots):
    donor, taker = two_slots
    donor.reset()
    donor.next_dist(list(range(10, 30)))  # 20 cells
    assert taker.adopt(donor, list(range(10, 60))) == 20
    donor.reset()
    assert taker.adopt(donor, list(range(10, 60))) == 0


def test_a_call_llama_cpp_finds_no_cells_for_is_read_again_from_an_empty_cache(
    two_slots, solo, monkeypatch
):
    """Where llama.cpp finds no free cells for a call (:class:`NoRoom`: in a unified cache a
    sequence's next token must lie after its last cell, and free cells may lie only before it),
    the slot drops its cache and reads its whole sequence again: the same rows as alone."""
    model = two_slots[0]
    prompt = np.random.default_rng(11).integers(3, VOCAB, size=70).tolist()
    model.reset()
    model.next_dist(prompt[:40])
    decode, refused = model._context.decode, []

    def no_room_once(rows):
        if not refused:
            refused.append(len(rows))
            raise NoRoom("no free cells")
        return decode(rows)

    monkeypatch.setattr(model._context, "decode", no_room_once)
    rows = model.score(prompt[:60], prompt[60:])
    assert refused == [30]  # the 30 tokens the cache lacked, refused; then all 70 read again
    assert np.array_equal(rows, solo[0].score(prompt[:60], prompt[60:]))
    assert model.cache_length == 70
