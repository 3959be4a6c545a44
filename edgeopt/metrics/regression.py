"""Regressions (boxes, landmarks, audio, unnormalised features): the error relative to the output's own scale.

A regression head has no class to agree on: argmax over four box deltas or ten landmark coordinates flips under
any noise. The figure is ``100 - 100 * mean |candidate - FP32| / range``, ``range`` being the spread of FP32's
values on the data (1st to 99th percentile, so one outlier doesn't set it): a drop of 0.5 points is a mean
error of half a percent of what the output spans (landmarks in a 0..1 window: 0.5 % of the window).
"""

from __future__ import annotations

import numpy as np

from .base import Metric, MetricName, sample_of

LOW_PCT, HIGH_PCT = 1.0, 99.0  # the range of FP32's values the error is measured against


def value_range(ref: list[np.ndarray]) -> float:
    """The spread of FP32's values over the samples (1st..99th percentile; the whole span, or 1, if that is 0)."""
    flat = np.concatenate([np.ravel(np.asarray(r, np.float64)) for r in ref])
    lo, hi = np.percentile(flat, [LOW_PCT, HIGH_PCT])
    spread = float(hi - lo) or float(flat.max() - flat.min())
    return spread if spread > 0 else 1.0


def _anchor_masks(ref, shape, out_name, fp32_outputs) -> tuple[list[np.ndarray] | None, str]:
    """Per sample, the positions FP32's per-position scores call an object (:func:`.choose.anchor_scores`), and the
    scores' name; (None, "") for an output without such scores, or when FP32 is confident nowhere."""
    from .choose import anchor_scores, confident

    names = list(fp32_outputs[0]) if fp32_outputs else []
    siblings = {k: [sample_of(o, k) for o in fp32_outputs] for k in names if k != out_name}
    scores = anchor_scores(siblings, out_name, tuple(shape))
    if scores is None:
        return None, ""
    masks = confident(siblings[scores])
    return (masks, scores) if any(m.any() for m in masks) else (None, "")


def relative_error_metric(ref, labels, spec, shape, out_name, n, role, fp32_outputs, search_path) -> Metric:
    masks, scores = _anchor_masks(ref, shape, out_name, fp32_outputs)
    where = (lambda i, a: a[masks[i]]) if masks is not None else (lambda i, a: a)
    kept = [where(i, np.asarray(r)) for i, r in enumerate(ref)]
    scale = value_range([k for k in kept if k.size] or ref)

    def error(i: int, y, r) -> float:  # a sample's mean |error| (where FP32's scores are confident, with them)
        d = np.abs(where(i, np.asarray(y, np.float64)) - where(i, np.asarray(r, np.float64)))
        return float(np.mean(d)) if d.size else 0.0

    def per_sample(got) -> np.ndarray:  # each sample's 100 - its mean |error| in % of the range: the bootstrap's rows
        return np.asarray([100.0 - 100.0 * error(i, y, r) / scale for i, (y, r) in enumerate(zip(got, ref, strict=True))],
                          np.float64)

    def aggregate(rows: np.ndarray) -> float:
        return max(0.0, float(np.mean(rows))) if len(rows) else 0.0

    at = f" on the positions where FP32's '{scores}' is confident (a sample with none counts 100)" if scores else ""
    return Metric(MetricName.RELATIVE_ERROR, "relative_error_vs_fp32",
                  f"100 minus the mean |error| vs FP32's output{at} as % of its range on the data ({scale:.4g}); "
                  "the drop is the mean error in % of that range (labels not used)", "%", out_name, False, n,
                  lambda got: aggregate(per_sample(got)), digest=lambda o: np.asarray(sample_of(o, out_name), np.float32),
                  per_sample=per_sample, aggregate=aggregate)
