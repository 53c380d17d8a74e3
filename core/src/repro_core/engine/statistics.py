"""Statistics across seeds: the mean, its spread, and a 95 % confidence interval (Student's t).

One place for the numbers that study.json records and that the pictures draw as bands.
"""

from __future__ import annotations

import math

# Student's t for a two-sided 95 % interval, by degrees of freedom (from its tables); beyond 30 the
# value moves from 2.042 towards the normal 1.960, taken here at 40, 60 and 120.
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
         10: 2.228, 11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101,
         19: 2.093, 20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052,
         28: 2.048, 29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


def t_975(degrees: int) -> float:
    known = max(d for d in T_975 if d <= degrees)
    return T_975[known] if degrees <= 120 else 1.960


def statistics_of(values: list[float]) -> dict[str, object]:
    """Mean, sample standard deviation, and the 95 % confidence interval of the mean (Student's t)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return {"mean": mean, "std": None, "ci95": None}
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_975(n - 1) * std / math.sqrt(n)
    return {"mean": mean, "std": std, "ci95": [mean - half, mean + half]}
