"""What an exit's answer is and when it counts as the full model's, by the run's task metric.

A classifier's answer is its top-1 class, and an exit agrees with the full model when the classes are equal. A
distribution over ordered bins (pitch, depth, age: the ``ordered_bins`` metric) answers with a position, the
weighted mean of the bins around its peak, and an exit agrees when its position is within the metric's tolerance
of the full model's: a head whose top bin is one 20-cent bin off holds the pitch the task asks for. The thresholds
(:mod:`.thresholds`), the held-back confirmation and the check of the cascade as written all judge with these.
"""

from __future__ import annotations

import numpy as np

from edgeopt.metrics.base import MetricName
from edgeopt.metrics.ordered_bins import TOLERANCE_BINS, positions

JUDGED = (MetricName.TOP1, MetricName.ORDERED_BINS)  # the metrics an exit is judged by; any other: top-1


def exit_metric(spec, output: str, scores: np.ndarray, labels) -> MetricName:
    """The run's metric for the class output ``output`` (``--metric``, else chosen from the full model's outputs
    on --eval as every accuracy search chooses it), narrowed to one an exit can be judged by: ordered bins, else
    top-1."""
    from edgeopt.errors import EdgeoptError
    from edgeopt.metrics import metric_for_outputs
    from edgeopt.metrics.base import MetricSpec

    spec = spec or MetricSpec()
    kind = (spec.kinds or {}).get(output) or spec.name
    if kind is None:
        try:
            kind = metric_for_outputs([{output: scores[i:i + 1]} for i in range(len(scores))], labels, spec).kind
        except EdgeoptError:  # outputs no metric judges as they are: their classes do
            kind = MetricName.TOP1
    return kind if kind in JUDGED else MetricName.TOP1


def answers(kind: MetricName, scores: np.ndarray) -> np.ndarray:
    """Each row's answer: its top-1 class, or (ordered bins) its peak position."""
    scores = np.asarray(scores).reshape(len(scores), -1)
    return positions(scores) if kind == MetricName.ORDERED_BINS else scores.argmax(axis=1)


def agrees(kind: MetricName, a, b) -> np.ndarray:
    """Per sample, whether answers ``a`` and ``b`` count as the same (a label is an answer too)."""
    a, b = np.asarray(a), np.asarray(b)
    if kind == MetricName.ORDERED_BINS:
        return np.abs(a.astype(np.float64) - b.astype(np.float64)) <= TOLERANCE_BINS
    return a == b
