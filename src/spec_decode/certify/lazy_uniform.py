"""A uniform draw that is resolved only as far as the code under test looks at it.

Nearly every real sampler draws ``u = uniform()`` and then only *compares* it with thresholds
(``u < p / q``, ``u * q < p``, ``1 - u >= t``). Such code depends on u only through which side of
each threshold it falls, so its output distribution is a finite sum: :class:`LazyUniform` keeps
the interval [lo, hi) that u is known to lie in, and each comparison whose answer is not yet
determined becomes a choice point of the enumerating source with the two sub-intervals' shares of
[lo, hi) as probabilities. The interval then shrinks to the chosen side, so later comparisons of
the same draw stay consistent (a rule that reuses one uniform is enumerated faithfully).

Scalar arithmetic keeps the value an affine function ``scale * u + offset`` of the draw, so
comparisons after ``u * c``, ``c - u``, ``u + c`` or ``u / c`` still split exactly. Anything else
(``float(u)``, numpy conversion, indexing, ``log(u)``, comparing with an array) raises
:class:`NotEnumerable` naming the operation, and the auditor falls back to its statistical test.
Ties (u exactly equal to a threshold) have probability zero, so ``<`` and ``<=`` split alike.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any


class NotEnumerable(Exception):
    """The code used a uniform draw other than by comparing it with scalar thresholds."""


#: Makes a choice between (value, probability) options and returns the chosen value.
Choose = Callable[[list[tuple[object, float]]], object]


class _Draw:
    """The interval one uniform draw is known to lie in, shrunk by every resolved comparison."""

    def __init__(self, choose: Choose) -> None:
        self.choose = choose
        self.lo, self.hi = 0.0, 1.0

    def below(self, threshold: float) -> bool:
        """Whether the draw is below ``threshold``: a choice point unless already determined."""
        if threshold <= self.lo or threshold != threshold:  # u < NaN is False
            return False
        if threshold >= self.hi:
            return True
        width = self.hi - self.lo
        below = bool(
            self.choose(
                [(True, (threshold - self.lo) / width), (False, (self.hi - threshold) / width)]
            )
        )
        if below:
            self.hi = threshold
        else:
            self.lo = threshold
        return below


def _scalar(value: object) -> float | None:
    """``value`` as a float when it is a real scalar (Python, numpy or a 0-d tensor), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Real):
        return float(value)
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        item = value.item()
        return float(item) if isinstance(item, numbers.Real) else None
    return None


#: numpy ufuncs a scalar may apply to the draw: (method when the draw is on the left, on the right).
_UFUNCS = {
    "add": ("__add__", "__radd__"),
    "subtract": ("__sub__", "__rsub__"),
    "multiply": ("__mul__", "__rmul__"),
    "divide": ("__truediv__", "__rtruediv__"),
    "less": ("__lt__", "__gt__"),
    "less_equal": ("__le__", "__ge__"),
    "greater": ("__gt__", "__lt__"),
    "greater_equal": ("__ge__", "__le__"),
}


class LazyUniform:
    """``scale * u + offset`` for a lazily resolved uniform draw u on [0, 1)."""

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, draw: _Draw, scale: float = 1.0, offset: float = 0.0) -> None:
        self._draw, self._scale, self._offset = draw, scale, offset

    @classmethod
    def new(cls, choose: Choose) -> LazyUniform:
        """A fresh draw whose comparisons are decided through ``choose``."""
        return cls(_Draw(choose))

    def _affine(self, other: object, operation: str, scale: float, offset: float) -> LazyUniform:
        if _scalar(other) is None:
            raise NotEnumerable(f"the code applied {operation} to a uniform() and a non-scalar")
        return LazyUniform(self._draw, scale, offset)

    def __add__(self, other: Any) -> LazyUniform:
        value = _scalar(other) or 0.0
        return self._affine(other, "+", self._scale, self._offset + value)

    __radd__ = __add__

    def __sub__(self, other: Any) -> LazyUniform:
        value = _scalar(other) or 0.0
        return self._affine(other, "-", self._scale, self._offset - value)

    def __rsub__(self, other: Any) -> LazyUniform:
        value = _scalar(other) or 0.0
        return self._affine(other, "-", -self._scale, value - self._offset)

    def __mul__(self, other: Any) -> LazyUniform:
        value = _scalar(other) or 0.0
        return self._affine(other, "*", self._scale * value, self._offset * value)

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> LazyUniform:
        value = _scalar(other)
        if not value:
            raise NotEnumerable("the code divided a uniform() draw by zero or a non-scalar")
        return LazyUniform(self._draw, self._scale / value, self._offset / value)

    def __rtruediv__(self, other: Any) -> LazyUniform:
        raise NotEnumerable("the code divided by a uniform() draw (not affine in the draw)")

    def __neg__(self) -> LazyUniform:
        return LazyUniform(self._draw, -self._scale, -self._offset)

    def _less(self, other: object, operation: str) -> bool:
        """Whether this value is below the scalar ``other`` (up to a tie of probability zero)."""
        threshold = _scalar(other)
        if threshold is None:
            raise NotEnumerable(f"the code compared a uniform() ({operation}) with a non-scalar")
        if self._scale == 0:
            return self._offset < threshold
        base = (threshold - self._offset) / self._scale
        below = self._draw.below(base)
        return below if self._scale > 0 else not below

    def __lt__(self, other: Any) -> bool:
        return self._less(other, "<")

    def __le__(self, other: Any) -> bool:
        return self._less(other, "<=")

    def __gt__(self, other: Any) -> bool:
        return not self._less(other, ">")

    def __ge__(self, other: Any) -> bool:
        return not self._less(other, ">=")

    def __eq__(self, other: object) -> bool:
        raise NotEnumerable("the code tested a uniform() draw for equality")

    def __ne__(self, other: object) -> bool:
        raise NotEnumerable("the code tested a uniform() draw for inequality")

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """Numpy scalars (``np.float64(t) > u``, ``c * u``) reach the Python operators; any other
        ufunc (``np.log(u)``, ``u < array``) is not enumerable."""
        operator = _UFUNCS.get(getattr(ufunc, "__name__", ""))
        if method != "__call__" or operator is None or kwargs or len(inputs) != 2:
            raise self._opaque(f"numpy.{getattr(ufunc, '__name__', ufunc)}")
        left, right = inputs
        if left is self:
            return getattr(self, operator[0])(right)
        return getattr(self, operator[1])(left)

    def _opaque(self, operation: str) -> NotEnumerable:
        return NotEnumerable(
            f"the code used a uniform() draw by {operation}; only comparisons with scalar "
            "thresholds (after scalar arithmetic) can be enumerated"
        )

    def __float__(self) -> float:
        raise self._opaque("float()")

    def __int__(self) -> int:
        raise self._opaque("int()")

    def __index__(self) -> int:
        raise self._opaque("indexing")

    def __bool__(self) -> bool:
        raise self._opaque("truth testing")

    def __array__(self, *args: object, **kwargs: object) -> Any:
        raise self._opaque("numpy conversion")

    def __repr__(self) -> str:
        draw = self._draw
        interval = f"[{draw.lo:g}, {draw.hi:g})"
        return f"LazyUniform({self._scale:g} * u + {self._offset:g}, u in {interval})"
