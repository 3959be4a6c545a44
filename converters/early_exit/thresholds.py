"""Exit thresholds by risk control.

Each exit's confidence is its head's max softmax. A sample leaves at the first exit whose confidence reaches that
exit's threshold, else runs the whole model. The thresholds are chosen on the search half of ``--eval`` so that
the cascade stays within ``--max-accuracy-drop`` of the model without exits (by the run's metric, :mod:`.answers`:
top-1 against the labels, or agreement with the full model when there are none; for ordered bins the peak
position within the metric's tolerance of the full model's) AND its disagreement with the full model stays within
``--exit-max-disagreement``: top-1 alone can hold while errors swap, an exit at chance level hidden by it.
With ``--exit-confidence L`` the disagreement is bounded by its one-sided Clopper-Pearson upper bound at level L
(distribution-free: it assumes only that the samples are drawn independently from the data the model will see),
not by the count seen.

The held-back half confirms with the convert gate's judge: the upper confidence limit of the drop (Tango's paired
limit, :func:`edgeopt.metrics.confidence.paired_upper`, at the run's ``--confidence``) within the bound. The
search half is judged by the same limit, at even odds (its median estimate, ``SEARCH_LEVEL``), against what that
judge accepts on the held-back half: the largest drop (and disagreement) the held-back half's size lets through
(:func:`accepted_points`). A threshold at the edge of the bound on the search half would be refused on the
held-back half about half the time; one whose search-half estimate is within what the held-back judge accepts is
what it will accept, unless the halves differ by more than the run's confidence allows. The held-back half is looked at once per run (one candidate), so its judge
keeps the run's confidence.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

from edgeopt.converters.early_exit.answers import agrees
from edgeopt.metrics.base import MetricName
from edgeopt.metrics.confidence import DEFAULT_CONFIDENCE, clopper_pearson_upper, paired_upper

GRID = 64  # candidate thresholds per exit (quantiles of its confidences)
NEVER = math.inf


@dataclass
class ExitScores:
    """On one data set: each exit's confidence and answer [exits][n] (top-1 class, or peak position for ordered
    bins: ``kind``, :mod:`.answers`), the full model's answer and the labels."""

    conf: list[np.ndarray]
    pred: list[np.ndarray]
    full: np.ndarray
    labels: np.ndarray | None
    kind: MetricName = MetricName.TOP1

    def subset(self, idx) -> ExitScores:
        return ExitScores([c[idx] for c in self.conf], [p[idx] for p in self.pred], self.full[idx],
                          None if self.labels is None else self.labels[idx], self.kind)


@dataclass
class Judged:
    drop: float  # points: accuracy drop vs the full model (labels), else disagreement with it
    disagreement: float  # points
    disagreement_bound: float  # points: the count's, or its Clopper-Pearson upper bound
    drop_upper: float  # points: the drop's upper confidence limit (Tango's, at the run's confidence)
    exit_shares: list[float]  # per exit, then the full model last
    holds: bool


def exits_taken(s: ExitScores, thresholds) -> np.ndarray:
    """Per sample, the index of the exit it leaves at (len(thresholds): the full model)."""
    taken = np.full(len(s.full), len(thresholds))
    for k in reversed(range(len(thresholds))):
        taken = np.where(s.conf[k] >= thresholds[k], k, taken)
    return taken


# the search half's drop is taken at its median estimate (the paired limit at 0.5: with no sample gained, the exact
# limit of the lost share at even odds); at the run's confidence even no lost sample of 300 (0.46 points at 0.75)
# is more than the held-back judge accepts for a 1-point bound (one sample, 0.33), so nothing could be chosen
SEARCH_LEVEL = 0.5


@functools.lru_cache(maxsize=256)
def accepted_points(held_n: int, bound: float, confidence: float, level: float | None = None,
                    counted: bool = False) -> float | None:
    """The largest share (points) of ``held_n`` samples that the held-back judge accepts: for the drop
    (``counted`` False), Tango's upper limit at ``confidence`` within ``bound``; for the disagreement (``counted``),
    its Clopper-Pearson bound at ``level``, or without one its count with one sample of room. None where the
    held-back half can accept nothing (too few samples for the bound)."""
    from edgeopt.validation_model import within_bound

    def accepts(k: int) -> bool:
        if not counted:
            return paired_upper(k, 0, held_n, confidence) <= bound + 1e-9
        if level is not None:
            return 100.0 * clopper_pearson_upper(k, held_n, level) <= bound + 1e-9
        return within_bound(100.0 * k / held_n, bound, 100.0 / held_n)

    if held_n <= 0 or not accepts(0):
        return None
    k = 0
    while k < held_n and accepts(k + 1):
        k += 1
    return 100.0 * k / held_n


def judge(s: ExitScores, thresholds, max_drop: float, max_disagreement: float, level: float | None,
          confidence: float = DEFAULT_CONFIDENCE, held_n: int | None = None) -> Judged:
    """The cascade with ``thresholds`` on ``s`` against the bound. As the held-back half (``held_n`` None): the
    drop's upper confidence limit at ``confidence`` within ``max_drop``, the disagreement's count (one sample of
    room) or its Clopper-Pearson bound at ``level`` within ``max_disagreement``. As the search half (``held_n``: the
    held-back half's size): each one's median estimate (its limit at ``SEARCH_LEVEL``) within what the held-back
    judge accepts on ``held_n`` samples (:func:`accepted_points`)."""
    from edgeopt.validation_model import sample_points, within_bound

    n = len(s.full)
    taken = exits_taken(s, thresholds)
    stacked = np.stack([*s.pred, s.full])
    pred = stacked[taken, np.arange(n)]
    k_dis = int((~agrees(s.kind, pred, s.full)).sum())
    disagreement = 100.0 * k_dis / max(n, 1)
    if s.labels is not None:
        full_ok, ok = agrees(s.kind, s.full, s.labels), agrees(s.kind, pred, s.labels)
        lost, gained = int((full_ok & ~ok).sum()), int((~full_ok & ok).sum())
    else:
        lost, gained = k_dis, 0
    drop, upper = 100.0 * (lost - gained) / max(n, 1), paired_upper(lost, gained, n, confidence)
    bound_dis = 100.0 * clopper_pearson_upper(k_dis, n, level) if level is not None else disagreement
    if held_n is None:
        drop_ok = upper <= max_drop + 1e-9
        dis_ok = (bound_dis <= max_disagreement + 1e-9 if level is not None
                  else within_bound(disagreement, max_disagreement, sample_points(MetricName.TOP1, "%", n)))
    else:
        room = accepted_points(held_n, max_drop, confidence)
        room_dis = accepted_points(held_n, max_disagreement, confidence, level, counted=True)
        drop_ok = room is not None and paired_upper(lost, gained, n, SEARCH_LEVEL) <= room + 1e-9
        dis_ok = room_dis is not None and paired_upper(k_dis, 0, n, SEARCH_LEVEL) <= room_dis + 1e-9
    shares = [float((taken == k).mean()) for k in range(len(thresholds) + 1)]
    return Judged(drop, disagreement, bound_dis, upper, shares, bool(drop_ok and dis_ok))


def choose_thresholds(s: ExitScores, enabled, max_drop, max_disagreement, level,
                      confidence: float = DEFAULT_CONFIDENCE, held_n: int | None = None) -> list[float]:
    """The lowest threshold of each enabled exit, earliest first, with which the cascade (later exits off)
    still holds the bound on ``s`` (judged as :func:`judge` does with ``confidence`` and ``held_n``); an exit
    with none that holds is off (``NEVER``)."""
    th = [NEVER] * len(s.conf)
    for k in enabled:
        grid = np.unique(np.quantile(s.conf[k], np.linspace(0.0, 1.0, GRID)))
        for t in grid:  # ascending: the first that holds lets the most samples leave
            trial = [*th[:k], float(t), *th[k + 1:]]
            if judge(s, trial, max_drop, max_disagreement, level, confidence, held_n).holds:
                th = trial
                break
    return th


def mean_ms(shares: list[float], segment_ms: list[float], head_ms: list[float], enabled) -> float:
    """Predicted mean latency: a sample leaving at exit k ran the segments up to k and every enabled head up to
    k; one reaching the end ran every segment and every enabled head."""
    total = 0.0
    for k, share in enumerate(shares):
        ran = sum(segment_ms[: k + 1]) if k < len(shares) - 1 else sum(segment_ms)
        heads = sum(head_ms[j] for j in enabled if j <= k)
        total += share * (ran + heads)
    return total


def best_cascade(s: ExitScores, segment_ms, head_ms, max_drop, max_disagreement, level,
                 exit_cost_ms: float = 0.0, confidence: float = DEFAULT_CONFIDENCE, held_n: int | None = None) -> dict:
    """Every subset of the exits, thresholds chosen for each: the one with the lowest predicted mean latency on
    ``s`` plus ``exit_cost_ms`` for each exit it keeps (the empty subset is the plain model). The charge stands for
    what each extra stage call costs in a runtime other than the one the stages were timed in (LiteRT, OpenVINO pay
    more per call than ONNX Runtime): an exit few samples take saves less than that and is left out. ``s`` is the
    search half, judged against what the held-back judge accepts on ``held_n`` samples (:func:`judge`). Returns
    {enabled, thresholds, mean_ms (the prediction, without the charge), judged}."""
    best, best_cost = None, math.inf
    exits = range(len(s.conf))
    for r in range(len(s.conf) + 1):
        for enabled in itertools.combinations(exits, r):
            th = choose_thresholds(s, enabled, max_drop, max_disagreement, level, confidence, held_n)
            on = tuple(k for k in enabled if th[k] != NEVER)
            j = judge(s, th, max_drop, max_disagreement, level, confidence, held_n)
            mean = mean_ms(j.exit_shares, segment_ms, head_ms, on)
            cost = mean + exit_cost_ms * len(on)
            if cost < best_cost - 1e-9:
                best, best_cost = {"enabled": on, "thresholds": th, "mean_ms": mean, "judged": j}, cost
    return best
