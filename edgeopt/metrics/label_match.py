"""Which output the labels belong to, on a model with several: the one they fit best.

An output fits when the labels can mean its classes (their range within its class count, their shape its
positions) and FP32 scores above chance with them on it; the best fit is the highest FP32 score. Two outputs that
fit equally (the same FP32 score) are not guessed between: exit 2 naming both, with ``--metric-output``.
"""

from __future__ import annotations

import numpy as np

from edgeopt.errors import EdgeoptError, UsageError

from .base import MetricName, sample_of
from .kinds import BUILDERS


def chance_pct(labels) -> float:
    """Chance level of the labels actually given: 100 / the number of distinct labels (-1 padding left out)."""
    arr = np.asarray(labels)
    if arr.dtype.kind == "O":
        return 0.0
    if arr.ndim >= 2 and arr.dtype.kind == "f" and not np.all(arr == np.round(arr)):
        arr = np.argmax(arr, axis=-1)  # probability rows
    elif arr.ndim >= 2 and arr.shape[-1] > 1 and set(np.unique(arr).tolist()) <= {0, 1} and arr.ndim == 2 \
            and np.all(arr.sum(axis=-1) == 1):
        arr = np.argmax(arr, axis=-1)  # one-hot rows
    distinct = np.unique(arr[arr != -1]) if arr.dtype.kind in "iuf" else np.unique(arr)
    return 100.0 / max(len(distinct), 2)


def _fp32_score(fp32_outputs, labels, spec, name, n, role) -> float | None:
    ref = [sample_of(o, name) for o in fp32_outputs]
    shape = tuple(ref[0].shape)
    kind = MetricName.TOP1 if len(shape) <= 1 else MetricName.POSITION_AGREEMENT
    try:
        m = BUILDERS[kind](ref, labels, spec, shape, name, n, role, fp32_outputs, None)
        return m.score_outputs(fp32_outputs)
    except EdgeoptError:
        return None


def labelled_output(fp32_outputs: list[dict], labels, spec, role: str) -> str:
    """The output ``labels`` belong to (``spec.output`` when given; the only one; else the best fit)."""
    names = list(fp32_outputs[0])
    if spec.output is not None or len(names) == 1:
        return spec.output or names[0]
    arr = np.asarray(labels)
    if arr.dtype.kind == "O" or (arr.ndim == 2 and arr.dtype.kind in "iu" and np.any(arr == -1)):
        return names[0]  # CTC sequences: the first output, as before
    n, chance = len(fp32_outputs), chance_pct(labels)
    scores = {k: s for k in names if (s := _fp32_score(fp32_outputs, labels, spec, k, n, role)) is not None}
    fits = {k: s for k, s in scores.items() if s > chance}
    if not fits:
        return names[0]  # none fits: the first output's metric says why
    best = max(fits.values())
    tied = [k for k, s in fits.items() if abs(s - best) < 1e-9]
    if len(tied) > 1:
        raise UsageError(f"the labels fit outputs '{tied[0]}' and '{tied[1]}' equally (FP32 scores {best:.3g} % on "
                         "each): which one do they belong to?", f"give --metric-output {tied[0]} (or {tied[1]})")
    return tied[0]
