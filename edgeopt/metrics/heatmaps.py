"""Keypoint heatmaps (a pose or hand model's one map per keypoint): judged by where each map's peak is.

A heatmap output ``[N,H,W,K]`` or ``[N,K,H,W]`` holds one map per keypoint; the task reads each map's peak (a
keypoint's position, MediaPipe's heatmap refinement, HRNet's decoding). An argmax over the K maps at every
position (a segmentation's reading) judges nothing the task uses: on a photo without a person every position is
background noise. The figure is the % of maps, among those where FP32's peak is confident (over ``threshold``: a
probability over 0.5, a logit over 0), whose peak position (the weighted centroid of the 3x3 cells around the top
cell) lies within ``tolerance`` cells of FP32's; with no confident map in the data, every map counts.
"""

from __future__ import annotations

import numpy as np

from .base import Metric, MetricName, decision_cut, sample_of

HEATMAP_WORDS = ("heatmap", "heat_map", "heatmaps")
MIN_SIDE = 8  # a map is at least 8x8 cells
MIN_KEYPOINTS = 2  # one map is a score map (map_iou), not keypoints
VALUES_PER_KEYPOINT = (2, 3, 4, 5)  # a sibling vector of K*d values: x, y[, z][, visibility][, presence]
COMPACT_SHARE = 0.8  # a map is one compact peak when this share of its cells above half its height lie near the top
COMPACT_MAPS = 0.5  # ... and heatmaps when at least this share of the maps are
REFINE_HALF = 1  # the cells either side of the top cell the position is read from


def channel_axis(shape: tuple) -> int:
    """The keypoint axis of one sample's ``[H,W,K]`` or ``[K,H,W]``: the odd one out of three sizes when the other
    two are equal, else the smaller of the first and the last."""
    if shape[0] == shape[1] != shape[2]:
        return 2
    if shape[1] == shape[2] != shape[0]:
        return 0
    return 0 if shape[0] < shape[2] else 2


def tolerance(side: int) -> float:
    """Cells a peak may move: 1/32 of the map's shorter side, at least one cell (2 of 64: 8 px of a 256 input)."""
    return max(1.0, side / 32)


def _maps(y, axis: int) -> np.ndarray:
    return np.moveaxis(np.asarray(y, np.float64), axis, 0)  # [K,H,W]


def _compact_share(ref: list[np.ndarray], axis: int) -> float:
    """The share of FP32's maps (up to 16 samples) whose cells above half their height sit near the top cell."""
    shares = []
    for y in ref[:16]:
        for m in _maps(y, axis):
            r = max(2, min(m.shape) // 16)
            top = np.unravel_index(np.argmax(m), m.shape)
            med = float(np.median(m))
            ys, xs = np.nonzero(m >= med + 0.5 * (m[top] - med))
            shares.append(float(np.mean((np.abs(ys - top[0]) <= r) & (np.abs(xs - top[1]) <= r))))
    return float(np.mean([s >= COMPACT_SHARE for s in shares])) if shares else 0.0


def looks_like_heatmaps(shape: tuple, ref: list[np.ndarray], out_name: str | None,
                        siblings: dict[str, list[np.ndarray]] | None) -> tuple[bool, str]:
    """Keypoint heatmaps told by the output's name, a sibling of K*d keypoint values, or compact peaks; with the
    why ("" when not)."""
    if len(shape) != 3 or np.asarray(ref[0]).dtype.kind != "f":
        return False, ""
    axis = channel_axis(shape)
    k = shape[axis]
    side = min(d for i, d in enumerate(shape) if i != axis)
    if k < MIN_KEYPOINTS or side < MIN_SIDE:
        return False, ""
    lower = (out_name or "").lower()
    if any(w in lower for w in HEATMAP_WORDS):
        return True, f"named like heatmaps: {k} maps"
    for name, vals in (siblings or {}).items():
        size, dims = int(np.prod(np.shape(vals[0]))), np.shape(vals[0])
        if name != out_name and sum(d > 1 for d in dims) == 1 and any(size == k * d for d in VALUES_PER_KEYPOINT):
            return True, f"{k} maps beside '{name}', {size // k} values for each of {k} keypoints"
    share = _compact_share(ref, axis)
    if share >= COMPACT_MAPS:
        return True, f"{k} maps, {100 * share:.0f} % of them one compact peak"
    return False, ""


def peaks(y, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Each map's peak position ([K,2], in cells: the weighted centroid of the cells around the top cell, weights
    the values less the window's minimum) and its top value ([K])."""
    maps = _maps(y, axis)
    k, h, w = maps.shape
    flat = maps.reshape(k, -1)
    top = np.argmax(flat, axis=1)
    ty, tx = np.divmod(top, w)
    pos = np.zeros((k, 2))
    for i in range(k):
        y0, y1 = max(0, ty[i] - REFINE_HALF), min(h, ty[i] + REFINE_HALF + 1)
        x0, x1 = max(0, tx[i] - REFINE_HALF), min(w, tx[i] + REFINE_HALF + 1)
        win = maps[i, y0:y1, x0:x1]
        wt = win - win.min()
        if wt.sum() <= 0:
            pos[i] = ty[i], tx[i]
            continue
        gy, gx = np.mgrid[y0:y1, x0:x1]
        pos[i] = (wt * gy).sum() / wt.sum(), (wt * gx).sum() / wt.sum()
    return pos, flat[np.arange(k), top]


def heatmap_metric(ref, labels, spec, shape, out_name, n, role, fp32_outputs, search_path) -> Metric:
    axis = channel_axis(shape)
    side = min(d for i, d in enumerate(shape) if i != axis)
    tol = tolerance(side)
    probs = all(np.all((np.asarray(r) >= 0) & (np.asarray(r) <= 1)) for r in ref[:32])
    t = spec.threshold
    cut = decision_cut(t, probs)
    target = [peaks(r, axis) for r in ref]
    masks = [top > cut for _, top in target]
    every = not any(m.any() for m in masks)
    if every:
        masks = [np.ones_like(m) for m in masks]

    def digest(o):
        return peaks(sample_of(o, out_name), axis)[0]

    def per_sample(got) -> np.ndarray:  # [maps within the tolerance, maps counted] per sample: pooled like score
        rows = []
        for g, (t_pos, _), m in zip(got, target, masks, strict=True):
            near = np.linalg.norm(np.asarray(g) - t_pos, axis=1) <= tol
            rows.append((float(np.sum(near & m)), float(np.sum(m))))
        return np.asarray(rows, np.float64).reshape(-1, 2)

    def aggregate(rows: np.ndarray) -> float:
        total = float(np.sum(rows[:, 1]))
        return 100.0 * float(np.sum(rows[:, 0])) / total if total else 100.0

    which = "every map (FP32 is confident in none)" if every else \
        f"the maps whose FP32 peak is over {t:g}" + ("" if probs else f" (logits: {t:g} of their sigmoid)")
    return Metric(MetricName.HEATMAP_PEAKS, f"peak_within_{tol:g}_cells_vs_fp32",
                  f"% of {which} whose peak position (the weighted centroid of the 3x3 cells around the top cell) "
                  f"is within {tol:g} cells of FP32's, {shape[axis]} maps of "
                  f"{'x'.join(str(d) for i, d in enumerate(shape) if i != axis)} (labels not used)", "%", out_name,
                  False, n, lambda got: aggregate(per_sample(got)), digest=digest, per_sample=per_sample,
                  aggregate=aggregate)
