"""Distributions over ordered bins (pitch, depth, age): judged by where the peak is, within a tolerance of bins.

A softmax or sigmoid row over many ordered bins (CREPE: 360 bins of 20 cents) is read as a position, the weighted
mean of the bins around its peak, not as a class: its top bin moving by one bin is a 20-cent difference, which the
task (pitch within 50 cents) doesn't notice. The figure is the % of rows whose position is within
``TOLERANCE_BINS`` of FP32's.
"""

from __future__ import annotations

import numpy as np

from .base import Metric, MetricName, sample_of

MIN_BINS = 32  # a long last axis: bins, not a handful of classes
TOLERANCE_BINS = 2.0  # CREPE: 2 bins = 40 cents, inside the 50 cents a pitch estimate is judged at
PEAK_HALF_WIDTH = 4  # the bins either side of the peak the position is read from (CREPE's own decoding)
NEAR_PEAK_MASS = 0.5  # unimodal: on average this share of a row's mass lies near its peak
NEIGHBOUR_RATIO = 0.2  # smooth: the peak's neighbours hold this share of the peak on average (a class doesn't)


def _rows(y) -> np.ndarray:
    y = np.asarray(y, np.float64)
    return y.reshape(-1, y.shape[-1])


def positions(y) -> np.ndarray:
    """Each row's position: the weighted mean of the bins within ``PEAK_HALF_WIDTH`` of its peak."""
    rows = _rows(y)
    peak = np.argmax(rows, axis=1)
    offs = np.arange(-PEAK_HALF_WIDTH, PEAK_HALF_WIDTH + 1)
    idx = np.clip(peak[:, None] + offs[None, :], 0, rows.shape[1] - 1)
    w = np.clip(np.take_along_axis(rows, idx, axis=1), 0, None)
    total = w.sum(axis=1)
    return np.where(total > 0, (w * idx).sum(axis=1) / np.where(total > 0, total, 1), peak)


def looks_like_ordered_bins(ref: list[np.ndarray]) -> tuple[bool, str]:
    """Non-negative rows over at least ``MIN_BINS`` bins whose mass sits around one smooth peak; with the why."""
    first = np.asarray(ref[0])
    if first.ndim == 0 or first.shape[-1] < MIN_BINS or first.dtype.kind != "f":
        return False, ""
    rows = np.concatenate([_rows(y) for y in ref[:64]])
    if np.any(rows < 0) or np.any(rows > 1 + 1e-6):
        return False, ""
    width = max(PEAK_HALF_WIDTH, rows.shape[1] // 24)
    peak = np.argmax(rows, axis=1)
    cols = np.arange(rows.shape[1])[None, :]
    near = np.abs(cols - peak[:, None]) <= width
    total = rows.sum(axis=1)
    mass = float(np.mean(np.where(total > 0, (rows * near).sum(axis=1) / np.where(total > 0, total, 1), 0)))
    at, last = np.arange(len(rows)), rows.shape[1] - 1
    left = np.where(peak > 0, rows[at, np.clip(peak - 1, 0, None)], 0.0)
    right = np.where(peak < last, rows[at, np.clip(peak + 1, None, last)], 0.0)
    top = np.maximum(rows[at, peak], 1e-12)
    ratio = float(np.mean(np.maximum(left, right) / top))
    ok = mass >= NEAR_PEAK_MASS and ratio >= NEIGHBOUR_RATIO
    return ok, (f"rows over {rows.shape[1]} bins in [0, 1] with {100 * mass:.0f} % of their mass within "
                f"{width} bins of one smooth peak (its neighbours at {100 * ratio:.0f} % of it)")


def ordered_bins_metric(ref, labels, spec, shape, out_name, n, role, fp32_outputs, search_path) -> Metric:
    target = [positions(r) for r in ref]

    def per_sample(got) -> np.ndarray:  # [rows within the tolerance, rows] per sample: pooled like score
        return np.asarray([[float(np.sum(np.abs(g - t) <= TOLERANCE_BINS)), float(np.size(t))]
                           for g, t in zip(got, target, strict=True)], np.float64).reshape(-1, 2)

    def aggregate(rows: np.ndarray) -> float:
        total = float(np.sum(rows[:, 1]))
        return 100.0 * float(np.sum(rows[:, 0])) / total if total else 0.0

    def score(got) -> float:
        return aggregate(per_sample(got))

    return Metric(MetricName.ORDERED_BINS, f"peak_within_{TOLERANCE_BINS:g}_bins_vs_fp32",
                  f"% of rows whose peak position (weighted mean of the {2 * PEAK_HALF_WIDTH + 1} bins around the "
                  f"top bin) is within {TOLERANCE_BINS:g} bins of FP32's (labels not used)", "%", out_name, False,
                  n, score, digest=lambda o: positions(sample_of(o, out_name)), per_sample=per_sample,
                  aggregate=aggregate)
