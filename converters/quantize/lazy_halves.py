"""The halves rule's FP32 halves for the INT8 search: random halves of the eval samples, each with its metric,
scored at the first confirmation that needs them."""

from __future__ import annotations

from collections.abc import Callable

from edgeopt.errors import GateFailedError, UsageError
from edgeopt.metrics.halves import half_indices

from .task_metric import make_task_metric, replay


class LazyHalves:
    """The halves rule's FP32 halves (:func:`half_metrics`), scored at the first confirmation that needs them: a
    slow user metric's calls are spent on a choice to confirm, not before the search starts. ``count``: the
    halves there will be (0: no halves rule)."""

    def __init__(self, make: Callable[[], list] | None = None, count: int = 0):
        self._make, self.count, self._scored = make, count, None

    def __len__(self) -> int:
        return self.count

    @property
    def scored(self) -> bool:
        return self._scored is not None

    def get(self) -> list:
        if self._scored is None:
            self._scored = self._make() if self._make is not None else []
            self.count = len(self._scored)
        return self._scored


def half_metrics(outputs: list, both, spec, search_path) -> list:
    """The halves rule's (:mod:`edgeopt.metrics.halves`) random halves of the eval samples, each ``(indices,
    metric on that half)``: the halves the validation draws on the eval data as given, at their positions in
    ``both`` (a shuffle of it), so the convert gate judges the search's choice on the same halves. Empty when the
    eval data is too small to halve or a half can't be scored (a user's metric may need every label present)."""
    out = []
    for idx in half_indices(len(both), order=both.positions):
        try:
            m = make_task_metric(replay([outputs[i] for i in idx]), both.subset(idx), spec, search_path)
        except (GateFailedError, UsageError):
            raise
        except Exception:  # noqa: BLE001 - a user's metric that can't score a half: no spread, the other rules hold
            return []
        out.append((idx, m))
    return out
