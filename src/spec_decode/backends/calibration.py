"""Calibration: this machine's cost of a target pass by block length, measured on the loaded
backend, and cached.

The auto policy (:mod:`spec_decode.drafting.auto`) decides from a
:class:`~spec_decode.drafting.costs.CostCurve`, and the curve differs by machine more than by
anything else: on a few CPU cores a 17-token pass costs several one-token passes, on a GPU about
one. So the curve is measured where it is used, the way it is used: on a warm cache, each call
scores the last committed token plus n - 1 new ones (exactly a verification pass), for n = 1 ..
``max_block`` (every length to 17, where llama.cpp's tiles of 8 and 16 rows make dips, then every
8th to 64: :data:`BLOCK_SIZES`), sizes interleaved over ``repetitions`` rounds, median per size.
A draft token costs one one-token pass of the draft model.

Results are cached as JSON under the user cache directory (:mod:`.calibration_store`), one file
per model, keyed by backend, model path and size on disk, thread count, device, weight formats
and libraries, so a different build, machine setting or model file is measured afresh;
``recalibrate`` measures again regardless.

A curve decides every step of every later run, so it is never trusted blindly:

* Written atomically (a unique temporary file renamed into place), so no reader sees half of it.
* Read strictly: an entry that is not a JSON object with the expected keys, or whose times are
  not finite positive numbers, or a directory in the file's place, is reported by name (a
  warning on the ``spec_decode.backends.calibration`` logger) and measured again.
* Checked for noise when measured: if the median repetition is more than :data:`NOISY_SPREAD`
  above the fastest (the median over block lengths), other work disturbed the timing, so it is
  measured again (up to :data:`ATTEMPTS` times, keeping the quietest) and a warning names
  ``spec-decode calibrate --recalibrate`` if it never settles.
* Re-validated on use, cheaply: before a cached curve is used, one-token passes are timed
  (:func:`time_one_token`, a few passes); one that disagrees with the cache by more than
  :data:`STALE_FACTOR` either way means the cache is stale (measured while the machine was busy,
  or before it changed), and the model is measured again; if that measurement is disturbed too,
  the cached curve scaled to the pass timed now is used for this run.
"""

from __future__ import annotations

import logging
import math
import statistics
import time
from pathlib import Path
from typing import Any

from spec_decode.backends.calibration_store import (
    FORMAT,
    calibration_file,
    model_identity,
    read_entry,
    write_entry,
)
from spec_decode.core.models import Model, score
from spec_decode.drafting.costs import CostCurve

#: The block lengths measured: each one to 17, then every 8th to 64 (k = 63, the longest block
#: the exact-rows build scores exactly); the curve interpolates between them.
BLOCK_SIZES = (*range(1, 18), 24, 32, 40, 48, 56, 64)
#: The longest block measured by default.
MAX_BLOCK = BLOCK_SIZES[-1]
#: The committed context the timed passes extend (long enough to look like a real prompt).
CONTEXT = 64
#: A measurement whose median repetition exceeds its fastest by more than this fraction (median
#: over block lengths) was disturbed by other work.
NOISY_SPREAD = 0.25
#: A longer pass whose median is below a shorter pass's by more than this fraction of its own was
#: disturbed too: kernel tiles make dips of a few percent, never a 2-token pass cheaper than a
#: one-token pass (a burst of other work during the one-token rounds alone does that).
INVERTED = 0.5
#: How many times a disturbed measurement is repeated before it is kept with a warning.
ATTEMPTS = 3
#: A one-token pass timed now that is this many times slower or faster than the cached one
#: means the cached curve is stale.
STALE_FACTOR = 3.0
#: The command that measures a curve again.
FIX = "spec-decode calibrate --recalibrate"
log = logging.getLogger(__name__)
_clock = time.perf_counter  # the clock every timing reads (tests substitute a simulated one)
_revalidated: set[Path] = set()  # cache files already checked against a timed pass here


def block_sizes(max_block: int) -> tuple[int, ...]:
    """The block lengths measured for a curve up to ``max_block``: :data:`BLOCK_SIZES` up to it,
    and ``max_block`` itself."""
    if max_block < 1:
        raise ValueError(f"need max_block >= 1, got {max_block}")
    sizes = tuple(n for n in BLOCK_SIZES if n < max_block)
    return (*sizes, max_block)


def longest_block(model: Model) -> int:
    """The longest block calibrated for ``model``: :data:`MAX_BLOCK`, or half its context window
    where that is shorter (the timed passes extend a context of their own)."""
    window = getattr(model, "context_window", None)
    return MAX_BLOCK if window is None else max(1, min(MAX_BLOCK, int(window) // 2))


def measure_passes(model: Model, max_block: int = MAX_BLOCK, repetitions: int = 3) -> list[float]:
    """Median seconds of a pass scoring n tokens on a warm cache, for each n of
    :func:`block_sizes` (``max_block``).

    The model's cache (if it has ``reset``) is cleared first and filled with a fixed context
    of :data:`CONTEXT` token ids (fewer if the context window is short), untimed.
    """
    return [statistics.median(t) for t in _time_passes(model, max_block, repetitions)]


def spread(times: list[list[float]]) -> float:
    """How disturbed a measurement was: the median over block lengths of (median repetition /
    fastest repetition - 1); 0 for a perfectly steady machine."""
    return statistics.median(_excess(t) for t in times)


def inversion(medians: list[float]) -> float:
    """How far the medians run backwards: the most a shorter pass's median exceeds a longer
    pass's, as a fraction of the longer one (0 for a curve that never falls)."""
    worst, highest = 0.0, 0.0
    for seconds in medians:
        if seconds > 0:
            worst = max(worst, highest / seconds - 1)
        highest = max(highest, seconds)
    return worst


def measure_quietly(
    model: Model, max_block: int = MAX_BLOCK, repetitions: int = 3, attempts: int = ATTEMPTS
) -> tuple[list[float], float]:
    """:func:`measure_passes`, repeated (up to ``attempts`` times) while its :func:`spread` is
    above :data:`NOISY_SPREAD` or its medians run backwards by more than :data:`INVERTED`
    (:func:`inversion`); the quietest attempt's medians and its noise (the larger of the two
    measures, each relative to its limit, times :data:`NOISY_SPREAD`)."""
    best: tuple[list[float], float] | None = None
    for _ in range(max(attempts, 1)):
        times = _time_passes(model, max_block, repetitions)
        medians = [statistics.median(t) for t in times]
        noise = max(spread(times), inversion(medians) * NOISY_SPREAD / INVERTED)
        if best is None or noise < best[1]:
            best = (medians, noise)
        if noise <= NOISY_SPREAD:
            break
    assert best is not None
    return best


def time_one_token(model: Model, repeats: int = 2) -> float:
    """Seconds of a one-token pass on a warm cache (the fastest of ``repeats``), the cheap check
    of a cached curve; the model's cache is reset before and after."""
    ids = [(17 + 31 * i) % model.vocab_size for i in range(2 + repeats)]
    _reset(model)
    score(model, ids[:2], [])  # untimed: the context, and the first call's own start-up
    best = math.inf
    for i in range(repeats):
        start = _clock()
        score(model, ids[: 3 + i], [])  # the cache covers ids[: 2 + i]: one new token is fed
        best = min(best, _clock() - start)
    _reset(model)
    return best


def disagrees(cached_seconds: float, measured_seconds: float, factor: float = STALE_FACTOR) -> bool:
    """Whether a time measured now is more than ``factor`` times off the cached one."""
    if not (measured_seconds > 0 and cached_seconds > 0):
        return True
    return not 1 / factor <= measured_seconds / cached_seconds <= factor


def _time_passes(model: Model, max_block: int, repetitions: int) -> list[list[float]]:
    """Seconds of every repetition of a pass scoring n tokens, for each n of
    :func:`block_sizes` (``max_block``)."""
    if max_block < 1 or repetitions < 1:
        raise ValueError(
            f"need max_block >= 1 and repetitions >= 1, got {max_block}, {repetitions}"
        )
    context = min(CONTEXT, getattr(model, "context_window", CONTEXT + max_block) - max_block)
    if context < 1:
        raise ValueError(
            f"the model's context window is too small to time {max_block}-token passes"
        )
    ids = [(17 + 31 * i) % model.vocab_size for i in range(context + max_block)]
    prefix, extra = ids[:context], ids[context:]
    _reset(model)
    score(model, prefix, [])  # untimed: reads the context into the cache, pages weights in
    sizes = block_sizes(max_block)
    times: list[list[float]] = [[] for _ in sizes]
    for _ in range(repetitions):
        for i, n in enumerate(sizes):
            start = _clock()
            score(model, prefix, extra[: n - 1])
            times[i].append(_clock() - start)
    return times


def _excess(repetitions: list[float]) -> float:
    fastest = min(repetitions)
    return statistics.median(repetitions) / fastest - 1 if fastest > 0 else 0.0


def _reset(model: Model) -> None:
    reset = getattr(model, "reset", None)
    if reset is not None:
        reset()


def cached_seconds(key: dict[str, object], max_block: int = 1) -> list[float] | None:
    """The cached pass times for the :func:`block_sizes` (``max_block``) of the model with this
    key, or None when there are none, some of those sizes were not measured, or the entry is
    malformed (reported by name)."""
    file = calibration_file(key)
    stored = read_entry(file, key)
    if isinstance(stored, str):
        log.warning("calibration %s %s; measuring it again", file, stored)
    if not isinstance(stored, tuple):
        return None
    by_size = dict(zip(*stored, strict=True))
    wanted = block_sizes(max_block)
    if not all(n in by_size for n in wanted):
        return None
    return [by_size[n] for n in wanted]


def cached_draft_seconds(key: dict[str, object], curve: CostCurve) -> float | None:
    """The cached cost of a draft token, judged before the draft is loaded, or None (load it
    and measure). A draft that costs more than a one-token target pass is not believed: a draft
    is the smaller model, and such a figure is what a busy machine leaves behind, which the
    auto policy would otherwise take as a reason never to load the draft, and so never to
    measure it again. A draft really that dear (the packaged one on the exact-rows build, its
    Q5_0 and Q8_0 weights on tinyBLAS at one row) is therefore loaded and timed at every start,
    then set aside (:func:`~spec_decode.serving.loader.load_models`)."""
    seconds = cached_seconds(key)
    if seconds is None or seconds[0] > curve.target(1):
        return None
    return seconds[0]


def pass_seconds(
    backend: str,
    model: Any,
    *,
    max_block: int | None = None,
    repetitions: int = 3,
    recalibrate: bool = False,
    check: bool = True,
) -> tuple[list[float], bool]:
    """The model's pass times for each n of :func:`block_sizes` (``max_block``) and whether they
    came from the cache.

    Uses the cached entry for :func:`model_identity` when it holds those sizes,
    ``recalibrate`` is False and (with ``check``) a one-token pass timed now agrees with it
    (once per process and file); otherwise measures (:func:`measure_quietly`) and stores it.
    A disturbed measurement does not replace a valid entry found stale (the machine may be busy
    only now: the entry is checked again on the next run), nor is it used: the entry's curve,
    measured quietly, scaled to the one-token pass timed now, is. A busy machine's curve holds
    its bursts (a 16-token pass timed at 40 one-token passes), and a planner that read it would
    misjudge every block until the server restarts.
    """
    max_block = longest_block(model) if max_block is None else max_block
    key = model_identity(backend, model)
    file = calibration_file(key)
    cached = None if recalibrate else cached_seconds(key, max_block)
    stale: list[float] | None = None  # the valid entry found stale, scaled to now
    if cached is not None and check and file not in _revalidated:
        now = time_one_token(model)
        if disagrees(cached[0], now):
            log.warning(
                "calibration %s is stale: a one-token pass takes %.1f ms now, %.1f ms there; "
                "measuring it again",
                file,
                1e3 * now,
                1e3 * cached[0],
            )
            cached, stale = None, [s * now / cached[0] for s in cached]
    if cached is not None:
        _revalidated.add(file)
        return cached, True
    seconds, noise = measure_quietly(model, max_block, repetitions)
    _revalidated.add(file)
    if noise > NOISY_SPREAD:
        log.warning(
            "the machine was busy while %s was measured (repetitions %.0f%% apart, or longer "
            "passes timed cheaper than shorter ones, after %d attempts); %s: run %s when it is "
            "quiet",
            key["model"],
            100 * noise,
            ATTEMPTS,
            "using the stored curve scaled to now" if stale is not None else "the curve may be off",
            FIX,
        )
        if stale is not None:
            return stale, False  # the cached entry is checked again next run
    entry = {
        "format": FORMAT,
        "identity": key,
        "sizes": list(block_sizes(max_block)),
        "seconds": seconds,
        "spread": noise,
        "measured": time.time(),
    }
    try:
        write_entry(file, entry)
    except OSError as error:
        log.warning("could not store calibration %s (%s); measured again next run", file, error)
    return seconds, False


def cost_curve(
    backend: str,
    target: Any,
    draft: Any | None = None,
    *,
    recalibrate: bool = False,
    check: bool = True,
) -> CostCurve:
    """The validated cost curve: the target's pass times (:func:`block_sizes` up to
    :func:`longest_block`) and the draft's
    per-token cost, each from the cache (checked against a pass timed now, with ``check``) or
    measured now."""
    seconds, _ = pass_seconds(backend, target, recalibrate=recalibrate, check=check)
    draft_seconds = None
    if draft is not None:
        draft_seconds = pass_seconds(
            backend, draft, max_block=1, recalibrate=recalibrate, check=check
        )[0][0]
    return CostCurve(block_sizes(longest_block(target)), tuple(seconds), draft_seconds)
