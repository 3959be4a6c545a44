"""The accuracy bound every searching stage shares, declared once.

The ONNX Q/DQ stage (``qdq``), the OpenVINO and TFLite backends (their INT8 searches), ``--prune auto`` and the
recover stage's early stopping all take their bound, task metric and search budget from one
:class:`AccuracyBound` field named ``bound`` in their config: these fields are the only declaration of
``--max-accuracy-drop``, ``--confidence``, ``--min-cosine``, ``--metric``, ``--search-budget``,
``--search-fraction`` and ``--min-speedup`` (:class:`edgeopt.options.ChainRequest` and the CLI flags are derived from them). A recipe
overrides one of them for one stage as ``stages: {qdq: {bound: {search_fraction: 0.3}}}``.

The task metric travels here, in the plan (and its hash), not beside it: where a user's ``MODULE:FUNCTION``
metric is imported from is the run's ``ChainContext.metric_search_path``.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from edgeopt.metrics.base import MetricSpec
from edgeopt.metrics.confidence import DEFAULT_CONFIDENCE

# The accuracy-aware searches' default time budget (s): the one default of --search-budget.
SEARCH_BUDGET_S = 120.0


class AccuracyBound(BaseModel):
    """How much accuracy a searching stage may trade, measured how, searched for how long."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_accuracy_drop: float | None = Field(
        default=None, ge=0.0,
        description="Gate and the INT8 search's target: most points of the task metric lost vs FP32 "
                    "(dB below --min-sqnr-db for sqnr).")
    min_cosine: float | None = Field(default=None, ge=-1.0, le=1.0,
                                     description="Gate: least cosine similarity of the outputs to FP32.")
    metric: MetricSpec | None = Field(
        default=None,
        description="Task metric: top1 | position_agreement | ctc | map_iou | cosine | sqnr | relative_error | "
                    "ordered_bins | heatmap_peaks | all_outputs, or MODULE:FUNCTION (your own; default: chosen per output from what "
                    "it means); OUTPUT=KIND sets one output's (comma-separated for several).")
    search_budget: float = Field(default=SEARCH_BUDGET_S, gt=0,
                                 description="Seconds for the accuracy-aware search (--max-accuracy-drop).")
    search_fraction: float = Field(
        default=0.5, gt=0.0, lt=1.0,
        description="Share of --eval the accuracy-aware search scores candidates on; the rest is held back to "
                    "confirm a hit.")
    confidence: float = Field(
        default=DEFAULT_CONFIDENCE, gt=0.5, lt=1.0,
        description="Confidence that the drop is within --max-accuracy-drop: its upper confidence limit must be "
                    "(a paired score limit for metrics that count samples, a seeded bootstrap for the others); "
                    "raise it for a stricter check, lower it to judge a small --eval set.")
    min_speedup: float | None = Field(
        default=None, gt=0,
        description="Gate: accuracy-aware INT8 must be this many times faster than FP32 (quick estimate).")

    @property
    def searching(self) -> bool:
        """Whether a bound is set: the stage searches for the cheapest model within it."""
        return self.max_accuracy_drop is not None
