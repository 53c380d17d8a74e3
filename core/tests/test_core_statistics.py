"""engine/statistics.py against what the test computes itself: the mean and the sample standard
deviation from Python's statistics module, Student's t from its density, integrated here."""

from __future__ import annotations

import math
import statistics

import pytest
from repro_core.engine.statistics import T_975, statistics_of, t_975


def t_quantile_975(degrees: int) -> float:
    """The t with P(T <= t) = 0.975 for Student's t with `degrees` degrees of freedom: its density
    integrated from 0 (Simpson's rule), the upper end found by bisection."""
    scale = math.exp(math.lgamma((degrees + 1) / 2) - math.lgamma(degrees / 2)) / math.sqrt(degrees * math.pi)

    def density(x: float) -> float:
        return scale * (1 + x * x / degrees) ** (-(degrees + 1) / 2)

    def area(upper: float, parts: int = 2000) -> float:  # from 0 to upper
        h = upper / parts
        inner = sum((4 if i % 2 else 2) * density(i * h) for i in range(1, parts))
        return h / 3 * (density(0) + inner + density(upper))

    low, high = 0.0, 20.0
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if area(middle) < 0.475 else (low, middle)
    return (low + high) / 2


@pytest.mark.parametrize("degrees", sorted(T_975))
def test_the_tables_t_is_students_to_its_three_decimals(degrees):
    assert T_975[degrees] == pytest.approx(t_quantile_975(degrees), abs=0.0006)


def test_between_the_tables_rows_the_row_below_gives_the_wider_interval_and_beyond_120_the_normals():
    assert [t_975(d) for d in (30, 31, 39, 40, 59, 60, 119, 120)] == [2.042, 2.042, 2.042, 2.021, 2.021, 2.000,
                                                                       2.000, 1.980]
    assert t_975(121) == t_975(10_000) == 1.960
    assert all(t_975(d) >= t_quantile_975(d) - 0.0006 for d in (31, 45, 90))  # never narrower than the truth


def test_one_value_has_a_mean_and_no_spread():
    assert statistics_of([0.25]) == {"mean": 0.25, "std": None, "ci95": None}


@pytest.mark.parametrize("values", [[0.5, 0.75], [0.91, 0.93, 0.9, 0.94, 0.92], [float(v) for v in range(40)]])
def test_the_mean_the_sample_deviation_and_the_95_percent_interval_of_the_mean(values):
    figures = statistics_of(values)
    n, mean, std = len(values), statistics.fmean(values), statistics.stdev(values)
    assert figures["mean"] == pytest.approx(mean, rel=1e-12) and figures["std"] == pytest.approx(std, rel=1e-12)
    half = t_975(n - 1) * std / math.sqrt(n)
    assert figures["ci95"] == pytest.approx([mean - half, mean + half], rel=1e-12)
    assert figures["ci95"][0] < mean < figures["ci95"][1]
