"""Seeded goodness-of-fit tests with thresholds from a significance level and a stated power.

The chi-square statistic of N samples from a distribution at total-variation distance delta from
the reference has noncentrality lambda = N sum (p_i - r_i)^2 / r_i >= 4 N delta^2 (Cauchy-Schwarz),
so the power against *every* alternative at TV >= delta is at least that of a noncentral chi-square
with lambda = 4 N delta^2. That bound, not a tuned constant, sets the sample sizes (it is the usual
large-sample approximation of the statistic's distribution).

scipy is imported inside the functions: the CLI imports this module to register ``audit`` and
must answer a bad command line within a second, before scipy's half second of imports.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: Cells whose expected count falls below this are pooled, so the chi-square approximation holds.
MIN_EXPECTED = 5.0


@dataclass(frozen=True)
class GoodnessOfFit:
    """Result of a chi-square goodness-of-fit test of observed counts against a reference."""

    statistic: float
    df: int
    p_value: float
    significance: float
    samples: int

    @property
    def rejected(self) -> bool:
        """True when the counts are inconsistent with the reference at the significance level."""
        return self.p_value < self.significance


def chi_square_test(
    counts: np.ndarray, reference: np.ndarray, significance: float
) -> GoodnessOfFit:
    """Test observed ``counts`` against ``reference`` probabilities (same shape, any dims).

    Any count in a cell of zero reference probability rejects outright (p-value 0). Cells with an
    expected count below :data:`MIN_EXPECTED` are pooled into one.
    """
    from scipy import stats

    counts = np.asarray(counts, dtype=float).ravel()
    reference = np.asarray(reference, dtype=float).ravel()
    n = int(counts.sum())
    if np.any(counts[reference <= 0] > 0):
        return GoodnessOfFit(float("inf"), 0, 0.0, significance, n)
    expected = n * reference
    small = (expected < MIN_EXPECTED) & (reference > 0)
    big = ~small & (reference > 0)
    observed_cells = [*counts[big], counts[small].sum()] if small.any() else list(counts[big])
    expected_cells = [*expected[big], expected[small].sum()] if small.any() else list(expected[big])
    if len(observed_cells) < 2:
        return GoodnessOfFit(0.0, 0, 1.0, significance, n)
    statistic, p_value = stats.chisquare(observed_cells, expected_cells)
    return GoodnessOfFit(float(statistic), len(observed_cells) - 1, float(p_value), significance, n)


def power_against_tv(samples: int, cells: int, tv: float, significance: float) -> float:
    """Lower bound on the chance the test rejects an alternative at total variation ``tv``."""
    from scipy import stats

    df = cells - 1
    critical = stats.chi2.isf(significance, df)
    return float(stats.ncx2.sf(critical, df, 4 * samples * tv**2))


def samples_for_power(cells: int, tv: float, significance: float, power: float) -> int:
    """Smallest sample size whose test detects any TV >= ``tv`` with at least ``power``."""
    from scipy import optimize, stats

    df = cells - 1
    critical = stats.chi2.isf(significance, df)
    noncentrality = optimize.brentq(lambda lam: stats.ncx2.sf(critical, df, lam) - power, 1e-9, 1e6)
    return int(np.ceil(noncentrality / (4 * tv**2)))


def detectable_tv(samples: int, cells: int, significance: float, power: float) -> float:
    """Smallest TV the test detects with probability >= ``power`` from ``samples`` draws."""
    from scipy import optimize

    return float(
        optimize.brentq(
            lambda tv: power_against_tv(samples, cells, tv, significance) - power, 1e-9, 1.0
        )
    )
