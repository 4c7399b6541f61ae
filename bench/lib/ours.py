"""One timed run of ours in process: a fixed k or a k policy through the generation loops, or
the default auto policy through the engine that ``generate`` and the server run."""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from bench.lib.records import trace_record
from spec_decode.backends.loading import Loaded
from spec_decode.core.generate import generate_autoregressive
from spec_decode.core.models import Model
from spec_decode.core.protocols import Drafter, KPolicy
from spec_decode.core.sampling import SamplingParams
from spec_decode.drafting.costs import CostCurve
from spec_decode.drafting.speculative import generate_speculative
from spec_decode.serving.config import EngineConfig
from spec_decode.serving.engine import Engine
from spec_decode.serving.request import RequestOptions


def run_ours(
    target: Model,
    draft: Model,
    ids: list[int],
    k: int | KPolicy | None,
    temperature: float,
    tokens: int,
    seed: int,
    drafter: Drafter | None = None,
) -> dict[str, object]:
    """One run of ours: target-only when ``k`` is None, else speculative with ``draft`` (or
    ``drafter``, when given) and a fixed k or a k policy."""
    target.reset()
    draft.reset()
    sampling = SamplingParams(temperature)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    if k is None:
        trace = generate_autoregressive(target, ids, tokens, rng, sampling=sampling)
    else:
        trace = generate_speculative(
            target, draft, ids, tokens, k, rng, sampling=sampling, drafter=drafter
        )
    return trace_record(trace, time.perf_counter() - start)


def run_auto(
    target: Loaded,
    draft: Loaded,
    costs: CostCurve,
    ids: list[int],
    *,
    temperature: float,
    tokens: int,
    seed: int,
    k_max: int,
) -> dict[str, object]:
    """One run of ours with the default auto policy, through the engine that ``generate`` and
    the server run (its default rule): a fresh engine per run, so the planner's acceptance
    estimates start from the prior, no history is shared and the caches start cold (one prompt
    per process, like the baselines); ``tokens`` tokens, end-of-generation included."""
    config = EngineConfig(k=k_max, shared_history=False, reuse_cache=False)
    whole = {"stop_ids": frozenset()}  # every variant generates the same number of tokens
    engine = Engine(
        config,
        dataclasses.replace(target, **whole),
        dataclasses.replace(draft, **whole),
        costs,
        k=k_max,
    )
    request = engine.prepare(
        ids, RequestOptions(sampling=SamplingParams(temperature), seed=seed), max_tokens=tokens
    )
    completion = engine.generate(request)
    return trace_record(completion.trace, completion.seconds)
