"""Plot parts shared by the benchmarks' figures."""

from __future__ import annotations


def plot_cost_curve(axis: object, cost_curve_ms: dict[str, float]) -> None:
    """Draw a calibrated cost curve (ms by tokens scored) in units of a one-token pass, beside
    the line of n one-token passes."""
    curve_ms = {int(n): ms for n, ms in cost_curve_ms.items()}
    sizes = list(curve_ms)
    axis.plot(sizes, [ms / curve_ms[1] for ms in curve_ms.values()], "o-")
    axis.plot(sizes, sizes, ":", color="grey", label="n one-token passes")
    axis.set_xlabel("tokens scored in one target pass")
    axis.set_ylabel("cost / one-token pass")
    axis.set_title("calibrated cost curve", fontsize=9)
    axis.legend(fontsize=7)
