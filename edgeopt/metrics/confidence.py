"""The confidence bound on an accuracy drop: a candidate is within ``--max-accuracy-drop`` when the upper confidence
limit of its drop is, at ``--confidence`` (:data:`DEFAULT_CONFIDENCE`), not when the drop measured on the eval
samples happens to be.

* A metric that counts samples right or wrong (top-1 accuracy or agreement, a decision, CTC exact match): the
  paired outcomes of FP32 and the candidate on each sample give ``lost`` (FP32 right, candidate wrong) and
  ``gained`` (the reverse), the drop being ``(lost - gained) / n``. Its upper limit is **Tango's score confidence
  limit for a difference of paired proportions** (Tango 1998, Statistics in Medicine 17:891; at a zero difference
  its statistic is McNemar's), one-sided: the largest drop the paired samples don't reject at that confidence.
  When the candidate gained no sample, the drop is at most the share of samples lost, and Tango's limit is never
  taken below that share's **exact (Clopper-Pearson) upper limit** (:func:`exact_upper`): there a score limit is
  Wilson's, which at few lost samples covers far less often than it says (no sample lost of 150: 0.30 points at
  0.75 confidence, where the exact limit is 0.92; a candidate that loses 1 in 200 samples shows none of 150 lost
  47 % of the time). With no discordant sample the limit is ``1 - (1 - c)^(1/n)``, so an eval set too small to
  confirm any candidate is told before any work (:func:`samples_needed`).
* Any other metric with per-sample scores (cosine, per-position agreement, map IoU, SQNR, every output's worst):
  a **percentile bootstrap** of the drop, :data:`BOOTSTRAP_COUNT` resamples of the samples drawn with a fixed
  seed (the same figure on every run), the drop recomputed on each; its ``confidence`` quantile.

A metric exposes its per-sample scores by ``Metric.per_sample(digests) -> np.ndarray`` (one row per sample, in the
metric's unit) and, when its figure is not the rows' mean, ``Metric.aggregate(rows) -> float`` (SQNR pools signal
and noise); a metric without them (a user's ``MODULE:FUNCTION``) is judged by the halves rule
(:mod:`edgeopt.metrics.halves`).

Several looks at the held-back samples (a search confirms each candidate that meets the bound on its own part)
share the risk: the k-th look is at confidence ``1 - (1 - c) * 6 / (pi² k²)`` (:func:`look_confidence`), whose
risks sum to ``1 - c`` over any number of looks (a Bonferroni split).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

DEFAULT_CONFIDENCE = 0.75  # one-sided: the bundled MNIST set (500 samples) confirms a 1-point bound for an INT8 that
# swaps two held-back samples each way (0.92 points); at 0.9 it was refused (1.55)
BOOTSTRAP_COUNT = 2000
BOOTSTRAP_SEED = 0
MIN_BOOTSTRAP_SAMPLES = 8  # fewer samples than this can't show a spread


def z_of(confidence: float) -> float:
    """The one-sided standard normal quantile of ``confidence``."""
    return NormalDist().inv_cdf(float(confidence))


@dataclass
class Looks:
    """How many times one run has looked at its held-back samples (each search's confirmations, every backend
    tried): the next look is judged at :func:`look_confidence` of its number, so all of a run's looks together
    keep the confidence asked for."""
    count: int = 0


def look_confidence(confidence: float, look: int) -> float:
    """The confidence of the ``look``-th (1, 2, …) look at the same samples, so that all looks together keep
    ``confidence``: risk ``(1 - confidence) * 6 / (pi² look²)``."""
    return 1.0 - (1.0 - float(confidence)) * 6.0 / (math.pi ** 2 * max(1, int(look)) ** 2)


def _tango_z(lost: int, gained: int, n: int, delta: float) -> float:
    """Tango's score statistic for a paired difference ``delta`` (a share, -1..1)."""
    w = -lost - gained + (2 * n - lost + gained) * delta
    q21 = (math.sqrt(max(0.0, w * w + 8.0 * n * gained * delta * (1.0 - delta))) - w) / (4.0 * n)
    var = n * (2.0 * q21 + delta * (1.0 - delta))
    num = lost - gained - n * delta
    if var <= 0:
        return 0.0 if abs(num) < 1e-12 else math.copysign(math.inf, num)
    return num / math.sqrt(var)


def paired_upper(lost: int, gained: int, n: int, confidence: float) -> float:
    """The one-sided upper confidence limit (points, 0-100) of the drop ``(lost - gained) / n``: Tango's, and
    when nothing was gained at least the exact limit of the lost share (module doc)."""
    if n <= 0:
        return 100.0
    tango = _tango_upper(lost, gained, n, confidence)
    return max(tango, exact_upper(lost, n, confidence)) if gained == 0 else tango


def _tango_upper(lost: int, gained: int, n: int, confidence: float) -> float:
    z, lo, hi = z_of(confidence), (lost - gained) / n, 1.0
    if _tango_z(lost, gained, n, hi - 1e-12) >= -z:
        return 100.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if _tango_z(lost, gained, n, mid) >= -z:
            lo = mid
        else:
            hi = mid
    return 100.0 * hi


def clopper_pearson_upper(k: int, n: int, level: float) -> float:
    """The exact (Clopper-Pearson) one-sided upper limit of a rate (a share, 0-1) seen ``k`` times in ``n``: the
    rate at which ``k`` or fewer would be seen with chance ``1 - level``."""
    if n <= 0 or k >= n:
        return 1.0
    alpha = 1.0 - float(level)
    if k == 0:
        return 1.0 - alpha ** (1.0 / n)
    lo, hi = k / n, 1.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if _binom_cdf(k, n, mid) > alpha:
            lo = mid
        else:
            hi = mid
    return hi


def exact_upper(k: int, n: int, confidence: float) -> float:
    """:func:`clopper_pearson_upper` in points (0-100)."""
    return 100.0 * clopper_pearson_upper(k, n, confidence)


def _binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed in log space."""
    if p <= 0.0:
        return 1.0
    if p >= 1.0:
        return 0.0 if k < n else 1.0
    lp, lq = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq
             for i in range(k + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms))


def samples_needed(bound_points: float, confidence: float) -> int | None:
    """The fewest samples on which a candidate with no discordant sample is within ``bound_points`` at
    ``confidence`` (the exact limit ``1 - (1 - c)^(1/n)``); None when no number is (a bound of 0)."""
    b = float(bound_points) / 100.0
    if b <= 0:
        return None
    if b >= 1:
        return 1
    n = max(1, math.floor(math.log(1.0 - float(confidence)) / math.log1p(-b)))
    while paired_upper(0, 0, n, confidence) > bound_points + 1e-9:
        n += 1
    return n


def paired_counts(fp32_rows: np.ndarray, cand_rows: np.ndarray) -> tuple[int, int]:
    """(lost, gained) from per-sample right/wrong scores (0 or 100, or 0/1)."""
    f, c = np.asarray(fp32_rows, np.float64).ravel() > 0, np.asarray(cand_rows, np.float64).ravel() > 0
    return int(np.sum(f & ~c)), int(np.sum(~f & c))


def _mean(rows: np.ndarray) -> float:
    return float(np.mean(rows))


def bootstrap_upper(fp32_rows, cand_rows, confidence: float, aggregate=None, fp32_constant: float | None = None,
                    count: int = BOOTSTRAP_COUNT, seed: int = BOOTSTRAP_SEED) -> float | None:
    """The ``confidence`` quantile of the drop over ``count`` bootstrap resamples of the samples (seeded: the
    same every run). ``aggregate(rows) -> figure`` (default: the mean); ``fp32_constant``: FP32's figure when it is
    fixed (SQNR's target) rather than computed from ``fp32_rows``. None below ``MIN_BOOTSTRAP_SAMPLES``."""
    cand = np.asarray(cand_rows, np.float64)
    n = len(cand)
    if n < MIN_BOOTSTRAP_SAMPLES:
        return None
    idx = np.random.default_rng(seed).integers(0, n, size=(count, n))
    if aggregate is None and fp32_constant is None:
        diff = np.asarray(fp32_rows, np.float64) - cand
        drops = diff[idx].mean(axis=1) if diff.ndim == 1 else diff[idx].mean(axis=(1, 2))
    else:
        agg = aggregate or _mean
        fp32 = None if fp32_constant is not None else np.asarray(fp32_rows, np.float64)
        drops = np.asarray([(fp32_constant if fp32 is None else agg(fp32[i])) - agg(cand[i]) for i in idx])
    return round(float(np.quantile(drops, confidence)), 4)


def drop_upper(m, cand_digests: list, confidence: float, order=None) -> float | None:
    """The upper confidence limit of ``m``'s drop for a candidate's digests (module doc), or None when ``m`` has no
    per-sample scores (a user's metric) or too few samples for a bootstrap. ``order``: the samples taken in this
    order first (the eval data as given, from a shuffle of it), so a search over shuffled parts and the gate on
    the data as given draw the same bootstrap resamples."""
    target = getattr(m, "fp32_is_target", False)
    if getattr(m, "per_sample", None) is None or (getattr(m, "fp32_rows", None) is None and not target):
        return None
    rows = np.asarray(m.per_sample(cand_digests), np.float64)
    fp32_rows = m.fp32_rows
    if order is not None:
        rows, fp32_rows = rows[order], None if fp32_rows is None else np.asarray(fp32_rows)[order]
    if counts_samples(m):
        lost, gained = paired_counts(fp32_rows, rows)
        return round(paired_upper(lost, gained, len(rows), confidence), 4)
    constant = m.fp32_value if target else None
    upper = bootstrap_upper(fp32_rows, rows, confidence, m.aggregate, constant)
    floors = [paired_upper(*paired_counts(np.asarray(fp32_rows)[:, a:b], rows[:, a:b]), len(rows), confidence)
              for _, (a, b) in counted_parts(m)]
    return round(max(floors + ([upper] if upper is not None else [])), 4) if floors else upper


def counted_parts(m) -> list[tuple[object, tuple[int, int]]]:
    """The parts of a several-output metric (``all_outputs``) that count samples, each with its columns in the
    per-sample rows: a presence flag's decisions among landmark regressions. The worst-of metric's bootstrap can't
    see what a part that lost no sample may lose on the next samples; each such part's exact limit is a floor under
    it (one flipped decision of 35 is 2.9 points)."""
    return [(p, cols) for p, cols in zip(m.parts or [], m.part_columns or [], strict=False) if counts_samples(p)]


def counted_samples(m) -> bool:
    """Whether a sample right or wrong moves ``m``: it counts samples, or one of its parts does."""
    return counts_samples(m) or bool(counted_parts(m))


def counts_samples(m) -> bool:
    """Whether ``m`` counts samples right or wrong (each sample's score 0 or 100): the paired limit applies."""
    from edgeopt.metrics.base import COUNTED_KINDS  # the rule of validation_model.sample_points

    return m.kind in COUNTED_KINDS and m.unit == "%" and m.samples > 0
