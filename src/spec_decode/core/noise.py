"""Positional noise: the randomness of one absolute output position, keyed by (seed, position).

Target-only decoding under positional noise emits y_t = S(p_t, xi_t) at output position t, where
``xi_t`` is the noise of position t and ``S`` a sampler that turns noise into a draw from p:

* the **race** (:class:`RaceNoise`): y = argmin_i E_i / p_i with E_i ~ Exp(1) i.i.d.
  (equivalent to Gumbel-max). Written in two levels: blocks of :data:`NOISE_BLOCK` entries race
  by their mass, then the entries of the winning block race by theirs, each level with its own
  noise keyed by (seed, position, block). Choosing a block with probability equal to its mass and
  then an entry with its share of that mass is sampling p, so the two-level race is exact in
  distribution; it draws about a thousand exponentials instead of one per vocabulary entry. A
  ``flat`` race (one exponential per entry) is kept for comparison.
* **inverse CDF** (:class:`UniformNoise`): one uniform u, y = the entry whose cumulative interval
  holds u. It only compares u with thresholds, so the exhaustive certificate can enumerate it
  (:mod:`spec_decode.certify.lazy_uniform`).

The noise of position t depends on the seed and t alone, never on how positions were grouped into
steps, so a speculative step that computes y_t = S(p_t, xi_t) at every drafted position emits
exactly the tokens target-only decoding emits for that seed (:mod:`spec_decode.core.coupled`).
Since xi_t is independent of everything before position t, and p_t depends only on earlier
tokens, y_t is an exact draw from p_t: the output is also distributed as target-only sampling.

The noise comes through the one door: a :class:`PositionalSource` is a
:class:`~spec_decode.core.randomness.RandomSource` that also gives ``noise(offset)``, the noise of
absolute position ``start + offset``; the generation loop re-bases it at every step
(:func:`positioned`). :class:`SeededNoise` computes the noise from a counter-based generator
(numpy's Philox with the position in its counter), so any position's noise costs the same
whatever was computed before; :class:`StreamNoise` takes one ``uniform()`` per position from any
other source, in the order positions are first asked for, which is what lets the enumerating
source of the certificates stand in for it.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Protocol, cast, runtime_checkable

import numpy as np

from spec_decode.core.randomness import NumpySource, RandomSource, fold_seed
from spec_decode.core.sampling import SamplingParams

#: Entries per block of the two-level race and of the two-level inverse-CDF search.
NOISE_BLOCK = 1024
#: The samplers a :class:`SeededNoise` can use.
SAMPLERS = ("race", "flat-race", "inverse-cdf")
#: Philox counter word that tells the streams of one position apart (block race, each block's
#: entries, the inverse-CDF uniform); word 1 holds the position, word 0 counts draws.
_STREAM_WORD = 2


@runtime_checkable
class PositionNoise(Protocol):
    """The noise of one output position, and the sampler that turns it into tokens."""

    def choose(self, probs: np.ndarray) -> int:
        """S(p, xi): a token drawn from ``probs`` with this position's noise."""
        ...

    def ranked(self, probs: np.ndarray, m: int) -> list[int]:
        """Up to ``m`` distinct tokens of positive probability, best first under this noise;
        the first is :meth:`choose`'s token (a tree's siblings drawn without replacement)."""
        ...


@runtime_checkable
class PositionalSource(RandomSource, Protocol):
    """A random source that also gives the noise of absolute output positions."""

    def noise(self, offset: int) -> PositionNoise:
        """The noise of absolute output position ``start + offset``."""
        ...

    def at(self, start: int) -> PositionalSource:
        """The same noise with offsets counted from absolute position ``start``."""
        ...


def is_positional(source: object) -> bool:
    """Whether ``source`` gives positional noise (has ``noise`` and ``at``).

    What ``isinstance(source, PositionalSource)`` decides, without its cost: Python 3.11 walks
    the protocol's members on every such check, and the generation loop asks at every step."""
    return callable(getattr(source, "noise", None)) and callable(getattr(source, "at", None))


def positioned(source: RandomSource, start: int) -> RandomSource:
    """``source`` with offsets counted from absolute position ``start``; any other source as is."""
    return source.at(start) if is_positional(source) else source  # type: ignore[attr-defined]


def sample_row(source: RandomSource, sampling: SamplingParams, raw: np.ndarray) -> int:
    """One token from the row ``raw`` warped by ``sampling``, at the step's first position: with
    that position's noise when ``source`` is positional (target-only decoding under the coupled
    rule), else a categorical draw.

    Greedy rows need neither: every sampler draws a one-hot row's one token, the argmax (the
    lowest id among ties, as the warp picks it), so it is returned without building the one-hot
    row or drawing noise over the vocabulary (about a millisecond a token on 151,936 entries)."""
    if sampling.greedy:
        return int(np.argmax(raw))
    probs = sampling.warp(raw)
    if is_positional(source):
        return source.noise(0).choose(probs)  # type: ignore[attr-defined]
    return source.categorical(probs)


def require_positional(source: RandomSource) -> PositionalSource:
    """``source`` itself, checked to give positional noise."""
    if not is_positional(source):
        raise TypeError(
            "the coupled rule needs positional noise: pass rng=positional_source(seed) "
            f"(spec_decode.core.noise), not a {type(source).__name__}"
        )
    return cast(PositionalSource, source)


def positional_source(
    rng: int | np.random.Generator | RandomSource, sampler: str = "race"
) -> PositionalSource:
    """A positional source for ``rng``: an int is the seed of :class:`SeededNoise` with
    ``sampler``; a numpy ``Generator`` (or a :class:`~spec_decode.core.randomness.NumpySource`)
    contributes one draw as that seed, so a freshly seeded generator always gives the same noise
    and a generator reused across runs gives each run its own; a positional source is returned
    as it is; any other source (the certificates' enumerating source) gives
    :class:`StreamNoise`, inverse CDF on its uniforms.
    """
    if is_positional(rng):
        return cast(PositionalSource, rng)
    if isinstance(rng, NumpySource):
        rng = rng.generator
    if isinstance(rng, np.random.Generator):
        rng = int(rng.integers(2**63))
    if isinstance(rng, int | np.integer):  # any integer, folded as every seed is
        return SeededNoise(np.random.SeedSequence(fold_seed(int(rng))), sampler)
    if isinstance(rng, RandomSource):
        return StreamNoise(rng)
    raise TypeError(f"cannot build positional noise from a {type(rng).__name__}")


class DelegatedDraws:
    """``bernoulli``, ``categorical`` and ``uniform`` passed on to the source ``draws``: what a
    positional source gives a rule that does not use positional noise."""

    draws: RandomSource

    def bernoulli(self, prob: float) -> bool:
        return self.draws.bernoulli(prob)

    def categorical(self, probs: np.ndarray) -> int:
        return self.draws.categorical(probs)

    def uniform(self) -> float:
        return self.draws.uniform()


class SeededNoise(DelegatedDraws):
    """Positional noise from a seed: a counter-based generator (Philox) keyed by the seed, with
    the position (and the stream within it) in its counter, so position t's noise is the same
    whenever and however often it is computed. The last few positions' noise is cached, since
    the draft and the target read the same position.

    ``bernoulli``, ``categorical`` and ``uniform`` come from a separate stream of the same seed,
    for rules that do not use positional noise.
    """

    #: Positions kept in the cache behind the current step's start.
    KEEP = 16

    def __init__(
        self,
        seed: np.random.SeedSequence,
        sampler: str = "race",
        start: int = 0,
        _shared: tuple[np.ndarray, dict[int, PositionNoise], RandomSource] | None = None,
    ) -> None:
        if sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, got {sampler!r}")
        if start < 0:
            raise ValueError(f"positions start at 0, got {start}")
        self.seed, self.sampler, self.start = seed, sampler, start
        if _shared is None:
            key = np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, 0))
            stream = np.random.SeedSequence(seed.entropy, spawn_key=(*seed.spawn_key, 1))
            _shared = (
                key.generate_state(2, np.uint64),
                {},
                NumpySource(np.random.default_rng(stream)),
            )
        self._shared = _shared
        self.key_words, self._cache, self.draws = _shared

    def noise(self, offset: int) -> PositionNoise:
        position = self.start + offset
        if position not in self._cache:
            self._cache[position] = self._compute(position)
        return self._cache[position]

    def _compute(self, position: int) -> PositionNoise:
        if self.sampler == "inverse-cdf":
            return UniformNoise(float(_generator(self.key_words, position, 0).random()))
        return RaceNoise(self.key_words, position, flat=self.sampler == "flat-race")

    def at(self, start: int) -> SeededNoise:
        for old in [p for p in self._cache if p < start - self.KEEP]:
            del self._cache[old]
        return SeededNoise(self.seed, self.sampler, start, self._shared)


class StreamNoise(DelegatedDraws):
    """Inverse-CDF positional noise from any random source: position t's uniform is the
    source's next ``uniform()`` when t is first asked for, and is kept for every later use.

    Positions are asked for in increasing order by every rule and drafter here, so under an
    enumerating source each position's uniform is one lazily resolved draw that the draft and
    the target compare with their own thresholds: the certificates enumerate the coupled code
    exactly. Other draws (``bernoulli``, ``categorical``) go to the source unchanged.
    """

    def __init__(
        self, inner: RandomSource, start: int = 0, _cache: dict[int, UniformNoise] | None = None
    ) -> None:
        self.draws, self.start = inner, start
        self._cache: dict[int, UniformNoise] = {} if _cache is None else _cache

    def noise(self, offset: int) -> UniformNoise:
        position = self.start + offset
        if position not in self._cache:
            self._cache[position] = UniformNoise(self.draws.uniform())
        return self._cache[position]

    def at(self, start: int) -> StreamNoise:
        return StreamNoise(self.draws, start, self._cache)


def _generator(key: np.ndarray, position: int, stream: int) -> np.random.Generator:
    """Philox keyed by the seed, its counter starting at (0, position, stream, 0)."""
    counter = np.zeros(4, dtype=np.uint64)
    counter[1], counter[_STREAM_WORD] = position, stream
    return np.random.Generator(np.random.Philox(key=key, counter=counter))


class RaceNoise:
    """The exponential race at one position: block noise (stream 0) and each block's entry
    noise (stream 1 + block), drawn when first needed; ``flat`` races every entry at once
    (stream 1, float32 exponentials, as a GPU kernel would)."""

    def __init__(self, key: np.ndarray, position: int, flat: bool = False) -> None:
        self.key, self.position, self.flat = key, position, flat
        self._exponentials: dict[tuple[int, int], np.ndarray] = {}

    def _noise(self, stream: int, size: int) -> np.ndarray:
        if (stream, size) not in self._exponentials:
            generator = _generator(self.key, self.position, stream)
            dtype = np.float32 if self.flat else np.float64
            self._exponentials[stream, size] = generator.standard_exponential(size, dtype=dtype)
        return self._exponentials[stream, size]

    def _keys(self, stream: int, masses: np.ndarray) -> np.ndarray:
        """E_i / mass_i, infinite where the mass is zero."""
        keys = np.full(masses.size, np.inf)
        np.divide(self._noise(stream, masses.size), masses, out=keys, where=masses > 0)
        return keys

    def choose(self, probs: np.ndarray) -> int:
        probs = _positive_mass(probs)
        if self.flat:
            return int(np.argmin(self._keys(1, probs)))
        block = int(np.argmin(self._keys(0, _block_sums(probs))))
        start = block * NOISE_BLOCK
        return start + int(np.argmin(self._keys(1 + block, probs[start : start + NOISE_BLOCK])))

    def is_stable(
        self,
        probs: np.ndarray,
        weights: np.ndarray,
        surely: np.ndarray,
        possibly: np.ndarray,
        eps: float,
    ) -> bool:
        """Whether :meth:`choose` on ``probs`` stays put when the tokens ``possibly`` kept may
        join those ``surely`` kept and every one's log-weight (``weights``, proportional to
        ``probs`` where kept) moves by at most ``eps``: the winner is surely kept and its log-key
        beats every other possibly kept key by more than eps, at each level (a block's key at
        its least mass against the others' at their most)."""
        token = self.choose(probs)
        if not surely[token]:
            return False
        if self.flat:
            return _beats(self._keys(1, np.where(possibly, weights, 0.0)), token, eps)
        least = _block_sums(np.where(surely, weights, 0.0))
        most = _block_sums(np.where(possibly, weights, 0.0))
        block, start = token // NOISE_BLOCK, token // NOISE_BLOCK * NOISE_BLOCK
        keys = self._keys(0, most)
        keys[block] = self._keys(0, least)[block]
        entries = np.where(possibly, weights, 0.0)[start : start + NOISE_BLOCK]
        entry_keys = self._keys(1 + block, entries)
        return _beats(keys, block, eps) and _beats(entry_keys, token - start, eps)

    def ranked(self, probs: np.ndarray, m: int) -> list[int]:
        """Blocks in race order, entries of each block in race order (flat: entries in race
        order); entries of zero mass never."""
        probs = _positive_mass(probs)
        if self.flat:
            return _best(self._keys(1, probs), m)
        tokens: list[int] = []
        for block in _best(self._keys(0, _block_sums(probs)), probs.size):
            start = block * NOISE_BLOCK
            entries = probs[start : start + NOISE_BLOCK]
            tokens += [start + i for i in _best(self._keys(1 + block, entries), m - len(tokens))]
            if len(tokens) == m:
                break
        return tokens


class UniformNoise:
    """Inverse CDF on one uniform ``u``: the point u * total is located among the cumulative
    sums of blocks of :data:`NOISE_BLOCK` entries, then inside its block. Only comparisons of u
    with thresholds (``bisect``), so a lazily resolved uniform is enumerated exactly."""

    def __init__(self, u: float) -> None:
        self.u = u

    def choose(self, probs: np.ndarray) -> int:
        probs = _positive_mass(probs)
        cumulative = np.cumsum(_block_sums(probs))
        point = self.u * float(cumulative[-1])
        block = _first_above(cumulative, point, cumulative)
        start = block * NOISE_BLOCK
        entries = probs[start : start + NOISE_BLOCK]
        offset = point - (float(cumulative[block - 1]) if block else 0.0)
        return start + _first_above(np.cumsum(entries), offset, entries)

    def is_stable(
        self,
        probs: np.ndarray,
        weights: np.ndarray,
        surely: np.ndarray,
        possibly: np.ndarray,
        eps: float,
    ) -> bool:
        """Whether :meth:`choose` on ``probs`` stays put when the tokens ``possibly`` kept may
        join those ``surely`` kept and every one's log-weight moves by at most ``eps``: as
        with A the mass up to and including the token and B the rest, every entry scaled by a
        factor in [1, e^eps] keeps the share A / (A + B) between A / (A + B e^eps) and
        A e^eps / (A e^eps + B); u stays below it while eps < log(A (1 - u) / (u B)), and
        likewise above the share before the token, with the masses on the side away from u at
        their most."""
        token, u = self.choose(probs), float(self.u)
        if not surely[token]:
            return False
        least, most = np.where(surely, weights, 0.0), np.where(possibly, weights, 0.0)
        upto, rest = float(least[: token + 1].sum()), float(most[token + 1 :].sum())
        below, after = float(most[:token].sum()), float(least[token:].sum())
        with np.errstate(divide="ignore"):
            if rest > 0 and not (u > 0 and np.log(upto * (1 - u) / (u * rest)) > eps):
                return False
            return not (below > 0 and not np.log(u * after / ((1 - u) * below)) > eps)

    def ranked(self, probs: np.ndarray, m: int) -> list[int]:
        """:meth:`choose`'s token, then the most probable others (lowest id on ties): one
        uniform orders nothing else."""
        probs = _positive_mass(probs)
        first = self.choose(probs)
        others = np.flatnonzero(probs > 0)
        others = others[others != first]
        by_mass = others[np.argsort(-probs[others], kind="stable")[: m - 1]] if m > 1 else []
        return [first, *(int(t) for t in by_mass)]


#: Added to every tolerance :func:`choice_stable` checks, for the float rounding of its bounds
#: and of the choice (sums in another order); far above it, far below any tolerance.
MARGIN_ROUNDING = 1e-9


def choice_stable(
    sampling: SamplingParams, raw_row: np.ndarray, noise: PositionNoise, tolerance: float
) -> bool:
    """Whether ``noise.choose(sampling.warp(raw_row))`` stays put under every perturbation of the
    raw row by at most ``tolerance`` (the largest change of the difference of any two raw
    logits): the test settling uses (:mod:`spec_decode.core.near_ties`).

    A token near a top-k, top-p or min-p cut makes the choice unstable only if it could win
    (:meth:`~spec_decode.core.sampling.SamplingParams.kept_bounds`): on a large vocabulary
    some token nearly always sits near a top-p or min-p cut, so a test that gave up on the
    whole row there would settle nearly every row. Greedy controls: True (the backend checks
    the top two itself). A noise without ``is_stable``: False (always settle).
    """
    if sampling.greedy:
        return True
    check = getattr(noise, "is_stable", None)
    if check is None:
        return False
    tolerance += MARGIN_ROUNDING
    weights, surely, possibly = sampling.kept_bounds(raw_row, tolerance)
    return bool(
        check(sampling.warp(raw_row), weights, surely, possibly, tolerance / sampling.temperature)
    )


def _beats(keys: np.ndarray, winner: int, eps: float) -> bool:
    """Whether log(keys[winner]) is below every other finite key's log by more than ``eps``."""
    others = np.delete(keys, winner)
    others = others[np.isfinite(others)]
    if others.size == 0:
        return True
    best = float(others.min())
    if best == 0:
        return False
    with np.errstate(divide="ignore"):
        return bool(np.log(best) - np.log(keys[winner]) > eps)


def _positive_mass(probs: np.ndarray) -> np.ndarray:
    probs = np.asarray(probs, dtype=np.float64)
    if probs.ndim != 1 or not probs.sum() > 0:
        raise ValueError("positional sampling needs one row with positive mass")
    return probs


def _block_sums(probs: np.ndarray) -> np.ndarray:
    """Mass of each block of :data:`NOISE_BLOCK` entries (the last one may be shorter)."""
    whole = probs.size - probs.size % NOISE_BLOCK
    sums = probs[:whole].reshape(-1, NOISE_BLOCK).sum(axis=1)
    return np.append(sums, probs[whole:].sum()) if whole < probs.size else sums


def _best(keys: np.ndarray, m: int) -> list[int]:
    """Indices of the ``m`` smallest finite keys, smallest first."""
    finite = np.flatnonzero(np.isfinite(keys))
    if m <= 0 or finite.size == 0:
        return []
    if finite.size > m:
        finite = finite[np.argpartition(keys[finite], m - 1)[:m]]
    return [int(i) for i in finite[np.argsort(keys[finite], kind="stable")]]


def _first_above(cumulative: Sequence[float], point: object, masses: np.ndarray) -> int:
    """The first index whose cumulative sum exceeds ``point`` (found by comparisons only), or
    else the last one of positive ``masses`` (the point reaches the total only by rounding)."""
    index = bisect.bisect_right(cumulative, point)  # type: ignore[call-overload]
    return index if index < len(cumulative) else int(np.flatnonzero(masses > 0)[-1])
