"""The eval data's two parts for the INT8 search: the search part and the held-back part, scored by one metric
kind chosen once on the whole eval set."""

from __future__ import annotations

import numpy as np

from edgeopt.metrics.halves import half_indices
from edgeopt.validation_model import sample_points

from .lazy_halves import LazyHalves, half_metrics
from .task_metric import make_task_metric, replay


def joined(a, b):
    """The two parts of the eval data as one data set (``a``'s samples, then ``b``'s)."""
    from edgeopt.data import Dataset

    labels = None if a.labels is None or b.labels is None else np.concatenate([a.labels, b.labels])
    positions = None if a.positions is None or b.positions is None else np.concatenate([a.positions, b.positions])
    return Dataset({k: np.concatenate([v, b.arrays[k]]) for k, v in a.arrays.items()}, labels, a.source,
                   a.synthetic, dict(a.ranks), list(a.notes), positions)


def part_metrics(fp32_run, search, confirm, spec=None, search_path=(), whole=None):
    """The metric of the search part, the held-back part and both together, of one kind: chosen once, on
    ``whole`` (the eval data as given, as the convert gate chooses it; default both parts together), then fixed
    for the parts. Chosen on each part alone, a borderline choice can differ between them (a recogniser whose
    FP32 argmax is the CTC blank at 48 % of positions on one half and 51 % on the other was searched by
    per-position agreement and confirmed by CTC exact match). Returns the three metrics and
    :func:`.lazy_halves.half_metrics` over both parts (empty for a metric that counts samples)."""
    from edgeopt.metrics import pinned_spec
    from edgeopt.metrics.flags import declared_kind

    s_out = [fp32_run(search.feed(i)) for i in range(len(search))]
    c_out = [fp32_run(confirm.feed(i)) for i in range(len(confirm))]
    both = joined(search, confirm)
    pinned = spec  # a kind the user named
    if declared_kind(spec) is None:  # chosen from FP32's outputs: once, as the gate chooses it
        chooser = (make_task_metric(fp32_run, whole, spec, search_path) if whole is not None
                   else make_task_metric(replay(s_out + c_out), both, spec, search_path))
        pinned = pinned_spec(spec, chooser)
    m_all = make_task_metric(replay(s_out + c_out), both, pinned, search_path)
    counted = sample_points(m_all.kind, m_all.unit, m_all.samples) is not None
    return (make_task_metric(replay(s_out), search, pinned, search_path),
            make_task_metric(replay(c_out), confirm, pinned, search_path), m_all,
            LazyHalves() if counted or m_all.per_sample is not None else
            LazyHalves(lambda: half_metrics(s_out + c_out, both, pinned, search_path),
                       len(half_indices(len(both), order=both.positions))))


def given_order(search, confirm) -> np.ndarray | None:
    """Where each sample of the eval data as given sits in ``search`` + ``confirm`` (a shuffle of it), so the
    bootstrap on all the samples draws what the convert gate's draws on the data as given; None: not a shuffle."""
    if search.positions is None or confirm.positions is None:
        return None
    positions = np.concatenate([search.positions, confirm.positions])
    if sorted(positions.tolist()) != list(range(len(positions))):
        return None
    return np.argsort(positions)
