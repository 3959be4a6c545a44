"""The halves rule, for a metric without per-sample scores (a user's ``MODULE:FUNCTION``), which the confidence bound
(:mod:`edgeopt.metrics.confidence`) can't judge: the drop must hold on ``HALVES_PERCENTILE`` % of ``HALVES`` random
halves of the eval samples, the spread over the halves standing in for a confidence limit. One declaration, used by every INT8 search's confirmation
(:mod:`edgeopt.converters.quantize.budget`) and by the validation of every artifact (:mod:`edgeopt.validate`), so
the convert gate, the pipeline's gate and ``optimize`` judge a candidate as the search that built it did.

Half-sampling (the delete-n/2 jackknife): the drop on each half spreads as the drop on all the samples would over
other data of that size. resemblyzer's LSTM, dynamic INT8: drop 0.73 points on 144 eval utterances, 1.52 at the
90th percentile of the halves, 2.05 on 144 unseen ones.
"""

from __future__ import annotations

import numpy as np

HALVES = 20  # random halves of all the eval samples
HALVES_PERCENTILE = 90  # the drop on 9 halves in 10 must be within the bound
MIN_SAMPLES = 8  # fewer eval samples than this are not halved


def half_indices(n: int, k: int = HALVES, seed: int = 0, order: np.ndarray | None = None) -> list[np.ndarray]:
    """``k`` random halves of ``n`` samples (sorted indices), the same for the same ``n``; empty below
    ``MIN_SAMPLES``. ``order``: the data is a shuffle of the data as given (``order[j]``: where sample ``j``
    came from); the halves are drawn on the data as given and returned at their positions in the shuffle, so
    a search over the shuffled parts and the validation on the data as given judge the same halves."""
    if n < MIN_SAMPLES:
        return []
    rng = np.random.default_rng(seed)
    halves = [np.sort(rng.choice(n, n // 2, replace=False)) for _ in range(k)]
    if order is None or len(order) != n or sorted(order) != list(range(n)):
        return halves
    where = np.argsort(order)  # where[i]: the position of the data's sample i in the shuffle
    return [np.sort(where[h]) for h in halves]


def percentile_drop(drops) -> float:
    """The drop the halves rule judges: the ``HALVES_PERCENTILE``-th percentile of the halves' drops."""
    return round(float(np.percentile(list(drops), HALVES_PERCENTILE)), 3)


def one_in() -> int:
    """The halves the rule lets miss, as "1 in N" (10 for the 90th percentile)."""
    return round(100 / (100 - HALVES_PERCENTILE))


def halves_drop(ref_outputs: list, got_outputs: list, labels, spec, search_path=None) -> float | None:
    """The halves rule's drop of ``got_outputs`` against FP32's ``ref_outputs`` (per sample, as
    :func:`edgeopt.metrics.metric_for_outputs` takes them), each half scored by the metric ``spec`` names (pinned
    to one kind), with ``labels`` when given. None when there are too few samples to halve or a half can't be
    scored (a user's metric may need every label present): the other rules still hold."""
    from edgeopt.metrics import metric_for_outputs

    drops = []
    for idx in half_indices(len(ref_outputs)):
        try:
            m = metric_for_outputs([ref_outputs[i] for i in idx], None if labels is None else labels[idx], spec,
                                   search_path=search_path)
            drops.append(m.fp32_value - m.score_outputs([got_outputs[i] for i in idx]))
        except Exception:  # noqa: BLE001 - a half a metric can't score: no spread
            return None
    return percentile_drop(drops) if drops else None
