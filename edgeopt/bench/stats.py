"""Statistics over benchmark samples: the per-run summary (shared with the device-side core),
the coefficient of variation of repeated medians, and the two-run regression test."""

from __future__ import annotations

from collections.abc import Sequence

from edgeopt.enums import StrEnum
from edgeopt.errors import BadInputError
from edgeopt.runtime.measure import latency_stats, median_ci_ranks

__all__ = ["Verdict", "latency_stats", "median_ci_ranks", "coefficient_of_variation", "compare_samples"]


class Verdict(StrEnum):
    REGRESSION = "regression"
    IMPROVEMENT = "improvement"
    NO_CHANGE = "no change"


def coefficient_of_variation(values: Sequence[float]) -> float:
    import numpy as np

    a = np.asarray(values, dtype=float)
    return float(a.std(ddof=1) / a.mean()) if a.size > 1 and a.mean() else 0.0


def compare_samples(a_ms: Sequence[float], b_ms: Sequence[float], *, threshold: float = 0.05,
                    alpha: float = 0.01) -> dict:
    """B against A: Mann-Whitney U (two-sided) and the relative change of the median (B / A - 1).

    "regression" needs p < ``alpha`` AND a median slower by more than ``threshold``;
    "improvement" is the mirror image; anything else is "no change".
    """
    import numpy as np
    from scipy.stats import mannwhitneyu

    if len(a_ms) < 2 or len(b_ms) < 2:
        raise BadInputError("both runs need per-run latency samples to compare", "re-run edgeopt bench (it keeps them)")
    a, b = np.asarray(a_ms, float), np.asarray(b_ms, float)
    p = float(mannwhitneyu(a, b, alternative="two-sided").pvalue)
    med_a, med_b = float(np.median(a)), float(np.median(b))
    change = med_b / med_a - 1.0
    if p < alpha and change > threshold:
        verdict = Verdict.REGRESSION
    elif p < alpha and change < -threshold:
        verdict = Verdict.IMPROVEMENT
    else:
        verdict = Verdict.NO_CHANGE
    return {
        "verdict": verdict.value,
        "p_value": p,
        "alpha": alpha,
        "threshold": threshold,
        "median_a_ms": med_a,
        "median_b_ms": med_b,
        "relative_change": change,
        "n_a": int(a.size),
        "n_b": int(b.size),
        "test": "Mann-Whitney U, two-sided (scipy.stats.mannwhitneyu)",
    }
