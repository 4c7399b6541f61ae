"""Positional noise: the randomness of one absolute output position, keyed by (seed, position).

Target-only decoding under positional noise emits y_t = S(p_t, xi_t) at output position t, where
``xi_t`` is the noise of position t and ``S`` a sampler that turns noise into a draw from p
(:mod:`spec_decode.core.samplers`):

* the **race** (:class:`~spec_decode.core.samplers.RaceNoise`): y = argmin_i E_i / p_i with
  E_i ~ Exp(1) i.i.d. (equivalent to Gumbel-max). Written in two levels: blocks of 1,024
  entries race by their mass, then the entries of the winning block race by theirs, each level
  with its own noise keyed by (seed, position, block). Choosing a block with probability equal
  to its mass and then an entry with its share of that mass is sampling p, so the two-level race
  is exact in distribution; it draws about a thousand exponentials instead of one per
  vocabulary entry. A ``flat`` race (one exponential per entry) is kept for comparison.
* **inverse CDF** (:class:`~spec_decode.core.samplers.UniformNoise`): one uniform u, y = the
  entry whose cumulative interval holds u. It only compares u with thresholds, so the
  exhaustive certificate can enumerate it (:mod:`spec_decode.certify.lazy_uniform`).

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

from typing import Protocol, cast, runtime_checkable

import numpy as np

from spec_decode.core.randomness import NumpySource, RandomSource, fold_seed
from spec_decode.core.samplers import PositionNoise, RaceNoise, UniformNoise, generator_at
from spec_decode.core.sampling import SamplingParams

#: The samplers a :class:`SeededNoise` can use.
SAMPLERS = ("race", "flat-race", "inverse-cdf")


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
            return UniformNoise(float(generator_at(self.key_words, position, 0).random()))
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
