"""Which metric kind fits one output, told by what it means (shape, FP32's values on the data, its name), and why.

Checked before the shape rules of :func:`edgeopt.metrics._auto` (classifier, sequence, CTC, map, embedding):

* keypoint heatmaps ([H,W,K] or [K,H,W]: named so, beside a vector of K*d keypoint values, or one compact peak
  per map) -> ``heatmap_peaks`` (:mod:`.heatmaps`);
* named like a regression (boxes, landmarks, deltas, audio) -> ``relative_error``;
* rows over many ordered bins with one smooth peak (pitch, depth, age) -> ``ordered_bins``;
* values per position beside per-position scores ([P,K] beside [P,1]), not themselves in [0, 1] ->
  ``relative_error`` on the positions where FP32's scores are confident (a detector's boxes and keypoints per
  anchor: the background's are never decoded); maps in [0, 1] beside maps (a transcriber's notes, onsets and
  pitch contours) are maps;
* beside a class/score output (named so, probability rows, or one value per sample: a landmark model's presence
  flag), an output that is no probability row itself -> ``relative_error`` (a detector's or a face stage's boxes
  and landmarks, a hand's 21 3-D points);
* one value per position ([N,P,1] scores, logits or probabilities) or per-anchor scores [N,P,C] in [0, 1] that
  are no softmax
  -> ``map_iou``: agreement where FP32 is confident, not over the background.
"""

from __future__ import annotations

import numpy as np

from .base import MetricName
from .heatmaps import looks_like_heatmaps
from .ordered_bins import looks_like_ordered_bins

REGRESSION_WORDS = ("box", "bbox", "regress", "landmark", "lmk", "delta", "offset", "coord", "keypoint", "kpt",
                    "loc", "audio", "wav", "signal", "enhanced")
CLASS_WORDS = ("class", "score", "prob", "logit", "conf", "cls")


def _word(name: str | None, words) -> str | None:
    lower = (name or "").lower()
    return next((w for w in words if w in lower), None)


def _dims(shape) -> str:
    return "[N" + "".join(f",{d}" for d in shape) + "]"


def is_distribution(ref: list[np.ndarray]) -> bool:
    """Values in [0, 1] (softmax or sigmoid outputs)."""
    return all(np.asarray(r).dtype.kind == "f" and np.all((r >= 0) & (r <= 1)) for r in ref[:32])


def is_softmax(ref: list[np.ndarray]) -> bool:
    """Non-negative rows summing to 1 along the last axis."""
    return is_distribution(ref) and all(np.allclose(np.sum(r, axis=-1), 1.0, atol=1e-3) for r in ref[:32])


def is_decision(ref: list[np.ndarray]) -> bool:
    """One value per sample: a score, probability or logit deciding one thing (a face or hand present)."""
    return int(np.prod(np.shape(ref[0]))) == 1


def class_sibling(siblings: dict[str, list[np.ndarray]], own: str | None, row: bool = False) -> str | None:
    """Another output that reads as class scores: named so, or probability rows; for a ``row`` (one vector per
    sample: a box, 21 points), also one decision value per sample (a presence flag beside the points; a recurrent
    state [2,1,T,C] beside a speech probability is no row and is left to the shape rules)."""
    for name, ref in siblings.items():
        if name != own and (_word(name, CLASS_WORDS) or is_softmax(ref) or (row and is_decision(ref))):
            return name
    return None


def anchor_scores(siblings: dict[str, list[np.ndarray]], own: str | None, shape: tuple) -> str | None:
    """The output that scores each position of a per-position output ``own`` of ``shape`` ([P,K], K > 1): same
    positions, one score each ([P,1]), or class-like scores ([P,C], C < K, named so or in [0, 1]). A detector's
    box and keypoint regressions sit beside such scores (BlazeFace [896,16] beside [896,1]); None without one."""
    if len(shape) < 2 or shape[-1] <= 1:
        return None
    for name, ref in siblings.items():
        other = tuple(np.asarray(ref[0]).shape)
        if name == own or len(other) != len(shape) or other[:-1] != shape[:-1] or other[-1] >= shape[-1]:
            continue
        if other[-1] == 1 or _word(name, CLASS_WORDS) or is_distribution(ref):
            return name
    return None


def confident(ref: list[np.ndarray]) -> list[np.ndarray]:
    """Per sample, the positions FP32's scores call an object: probability over 0.5 (logits: over 0), the best
    class counting ([P,C] -> [P])."""
    probs = is_distribution(ref)
    return [np.max(np.asarray(r), axis=-1) > (0.5 if probs else 0.0) for r in ref]


def choose_by_meaning(shape: tuple, ref: list[np.ndarray], out_name: str | None,
                      siblings: dict[str, list[np.ndarray]] | None = None) -> tuple[MetricName, str] | None:
    """The kind for one output without labels, or None to leave it to the shape rules; with the why."""
    if len(shape) == 0 or int(np.prod(shape)) <= 1:
        return None
    where = f"'{out_name}' {_dims(shape)}"
    heat, why = looks_like_heatmaps(shape, ref, out_name, siblings)
    if heat:
        return MetricName.HEATMAP_PEAKS, f"{where}: keypoint heatmaps ({why}); each map judged by its peak"
    word = _word(out_name, REGRESSION_WORDS)
    if word and not _word(out_name, CLASS_WORDS):
        return MetricName.RELATIVE_ERROR, f"{where} is named like a regression ('{word}')"
    ordered, why = looks_like_ordered_bins(ref)
    if ordered:
        return MetricName.ORDERED_BINS, f"{where}: {why}"
    scores = anchor_scores(siblings or {}, out_name, shape)
    if scores is not None and not _word(out_name, CLASS_WORDS) and not is_distribution(ref):
        return MetricName.RELATIVE_ERROR, (f"{where}: values per position beside the per-position scores "
                                           f"'{scores}': a detector's regressions, judged where FP32's scores are "
                                           "confident")
    other = class_sibling(siblings or {}, out_name, row=sum(d > 1 for d in shape) == 1)
    if other is not None and not _word(out_name, CLASS_WORDS) and not is_softmax(ref) and shape[-1] > 1:
        return MetricName.RELATIVE_ERROR, f"{where} is no probability row and sits beside the class output '{other}'"
    if len(shape) >= 2 and shape[-1] == 1:
        return MetricName.MAP_IOU, f"{where}: one score per position; judged where FP32 is confident"
    if len(shape) == 2 and is_distribution(ref) and not is_softmax(ref):
        return MetricName.MAP_IOU, f"{where}: score maps in [0, 1]; judged where FP32 is confident"
    return None


def shape_rule_why(kind: MetricName, shape: tuple, out_name: str | None) -> str:
    """Why the shape rules picked ``kind`` (one line)."""
    where = f"'{out_name}' {_dims(shape)}"
    if kind == MetricName.TOP1 and int(np.prod(shape)) == 1:
        return f"{where}: one decision value per sample (a probability decided at 0.5, a logit at 0)"
    return {
        MetricName.TOP1: f"{where}: one score per class",
        MetricName.COSINE: f"{where}: an embedding (unit-norm rows, or named like one)",
        MetricName.POSITION_AGREEMENT: f"{where}: a class axis at every position",
        MetricName.CTC: f"{where}: CTC logits (the blank leads FP32's argmax)",
        MetricName.MAP_IOU: f"{where}: a one-channel map in [0, 1]",
    }.get(kind, f"{where}: {kind.value}")
