"""The metric types: what the user asks for (:class:`MetricSpec`) and a metric bound to one data set."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from edgeopt.enums import StrEnum
from edgeopt.errors import BadInputError

from .custom import is_custom


class MetricName(StrEnum):
    TOP1 = "top1"
    POSITION_AGREEMENT = "position_agreement"
    CTC = "ctc"
    MAP_IOU = "map_iou"
    COSINE = "cosine"
    SQNR = "sqnr"
    CUSTOM = "custom"
    ALL_OUTPUTS = "all_outputs"  # every output judged by its own metric; the worst one counts
    RELATIVE_ERROR = "relative_error"  # regressions: mean |error| as % of FP32's range
    ORDERED_BINS = "ordered_bins"  # distributions over ordered bins (pitch, depth, age): the peak within bins
    HEATMAP_PEAKS = "heatmap_peaks"  # keypoint heatmaps: each map's peak within cells of FP32's


class MetricSpec(BaseModel):
    """What the user asked for (``--metric``, ``--metric-axis``, ``--ctc-blank``, ``--metric-threshold``,
    ``--min-sqnr-db``; the recipe's ``metric:``). ``name`` None: chosen from the output and the labels."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: MetricName | None = None
    axis: int | None = None  # the class axis of the (batched) output, e.g. 2 or -1 for [N,T,C]
    ctc_blank: int = 0
    threshold: float = 0.5
    min_sqnr_db: float | None = None  # the sqnr target (and gate); default 30 dB
    custom: str | None = None  # "pkg.module:function"
    output: str | None = Field(
        default=None, description="The output the task metric judges and the labels belong to (default: the "
                                  "output the labels fit; without labels every output, each by its own metric).")
    kinds: dict[str, MetricName] | None = None  # OUTPUT=KIND: one output's metric, the others chosen as usual

    @model_validator(mode="before")
    @classmethod
    def _custom_path(cls, data):
        if isinstance(data, str) and "=" in data:  # `metric: boxes=relative_error` (names may hold ':')
            items = [v.strip() for v in data.split(",") if v.strip()]
            names = [v for v in items if "=" not in v]
            data = {"name": names[0] if names else None,
                    "kinds": {k.strip(): v.strip() for k, _, v in (i.partition("=") for i in items if "=" in i)}}
        elif isinstance(data, str):  # the recipe's short form: `metric: ctc` / `metric: my_metrics:score`
            data = {"name": data}
        if isinstance(data, dict) and isinstance(data.get("name"), str) and is_custom(data["name"]):
            data = {**data, "name": MetricName.CUSTOM, "custom": data["name"]}
        return data

    @model_validator(mode="after")
    def _custom_needs_path(self):
        if self.name == MetricName.CUSTOM and not self.custom:
            raise ValueError("metric 'custom' needs a path: --metric my_pkg.metrics:score")
        return self


# the kinds whose samples are each right or wrong as a whole: one sample is worth 100/n points
COUNTED_KINDS = (MetricName.TOP1, MetricName.CTC)


@dataclass
class Metric:
    """A metric bound to one data set: its FP32 figure, and ``score``/``score_outputs`` for a candidate."""

    kind: MetricName
    name: str
    description: str
    unit: str  # "%" or "dB" ("" for a custom metric that doesn't say)
    output: str | None
    labels_used: bool
    samples: int
    _score: Callable[[list], float] = field(repr=False)  # over the samples' digests
    fp32_value: float = float("nan")
    higher_is_better: bool = True
    classes: int | None = None  # top-1 / per-position: chance is 1/classes with labels
    # what the metric keeps of one sample's outputs (a CTC reading, an argmax, a mask; the whole dict for a
    # user's metric): scoring a run keeps only these, not every output (~1 MB a sample for a recogniser)
    digest: Callable[[dict], object] = field(default=lambda out: out, repr=False)
    why: str = ""  # why this kind was chosen for the output (or "asked": --metric)
    parts: list = field(default_factory=list)  # all_outputs: each output's own Metric
    # per-sample scores for the confidence bound (edgeopt.metrics.confidence): digests -> one row per sample, in
    # the metric's unit; ``aggregate(rows)`` when the figure is not their mean. None: a metric without them
    per_sample: Callable[[list], np.ndarray] | None = field(default=None, repr=False)
    aggregate: Callable[[np.ndarray], float] | None = field(default=None, repr=False)
    fp32_rows: np.ndarray | None = field(default=None, repr=False)  # FP32's per-sample scores (set with fp32_value)
    fp32_is_target: bool = False  # fp32_value is a fixed target (sqnr), not FP32's own score
    # all_outputs: each part's (first, last + 1) columns in ``per_sample``'s rows
    part_columns: list = field(default_factory=list, repr=False)

    def outputs(self, run, dataset) -> list[dict]:
        """The outputs ``run`` gives on ``dataset``'s samples (keep them to score again cheaply)."""
        return [run(feed) for feed in dataset.feeds()]

    def score_outputs(self, outputs: list[dict]) -> float:
        return self.score_digests([self.digest(o) for o in outputs])

    def score_digests(self, digests: list) -> float:
        if len(digests) != self.samples:
            raise ValueError(f"metric {self.name} was made for {self.samples} samples, got {len(digests)}")
        return float(self._score(digests))

    def score(self, run, dataset) -> float:
        """``run`` on every sample, streamed: only each sample's digest is kept."""
        return self.score_digests([self.digest(run(dataset.feed(i))) for i in range(len(dataset))])

    def rows(self, outputs: list[dict]) -> np.ndarray | None:
        """Per-sample scores of these outputs (None: the metric has none)."""
        return None if self.per_sample is None else self.per_sample([self.digest(o) for o in outputs])

    def drop(self, value: float) -> float:
        return float(self.fp32_value - value)

    def to_json(self) -> dict:
        out = {"metric": self.name, "metric_kind": self.kind.value, "metric_description": self.description,
               "metric_unit": self.unit, "metric_basis": "labels" if self.labels_used else "fp32"}
        return {**out, "metric_outputs": [p.choice() for p in self.parts or [self]]}

    def choice(self) -> dict:
        """Which output this metric judges, by which kind, and why (the dry run's and the report's line)."""
        return {"output": self.output, "kind": self.kind.value, "metric": self.name, "why": self.why}


UNSURE_BAND = 0.1  # FP32 within this of the threshold, in probability, is its own coin-flip: a map's cell there is
# not counted against a candidate (a transcriber's onsets: half of FP32's onset cells lie between 0.4 and 0.6)


def unsure_band(threshold: float, probabilities: bool) -> tuple[float, float]:
    """The values around ``threshold`` where FP32 is unsure (:data:`UNSURE_BAND` either side, in probability; for
    logits, the logits of those probabilities): a map's cells there are not judged."""
    if probabilities or 0 < threshold < 1:
        lo, hi = max(threshold - UNSURE_BAND, 1e-6), min(threshold + UNSURE_BAND, 1 - 1e-6)
        return decision_cut(lo, probabilities), decision_cut(hi, probabilities)
    half = decision_cut(0.5 + UNSURE_BAND, False)  # a raw logit threshold: the same width in logits
    return threshold - half, threshold + half


def decision_cut(threshold: float, probabilities: bool) -> float:
    """The value a map or peak is called at: ``threshold`` for probabilities, the logit of it (the threshold of
    their sigmoid) for logits."""
    import math

    return threshold if probabilities or not 0 < threshold < 1 else math.log(threshold / (1 - threshold))


def sample_of(out: dict, name: str | None) -> np.ndarray:
    if name is not None and name not in out:
        raise BadInputError(f"--metric: the model has no output '{name}'", f"its outputs: {', '.join(out)}")
    y = np.asarray(out[name] if name is not None else next(iter(out.values())))
    return y[0] if y.ndim >= 2 and y.shape[0] == 1 else y


def class_axis(shape: tuple, spec: MetricSpec, out_name: str) -> int:
    """The class axis of one sample's output (without the batch axis)."""
    if spec.axis is not None:
        a = spec.axis - 1 if spec.axis > 0 else spec.axis
        if spec.axis == 0 or not -len(shape) <= a < len(shape):
            raise BadInputError(f"--metric-axis {spec.axis} is not a class axis of output '{out_name}' "
                                f"[N,{','.join(map(str, shape))}]", "count axes from 0 = the batch axis, or use -1")
        return a % len(shape)
    if len(shape) == 2:
        return 1  # [N,T,C]: sequences and frame-wise outputs put the classes last
    if len(shape) == 3:
        if shape[0] < shape[1] and shape[0] < shape[2]:
            return 0  # [N,C,H,W]
        if shape[2] < shape[0] and shape[2] < shape[1]:
            return 2  # [N,H,W,C]
    raise BadInputError(f"--metric: can't tell the class axis of output '{out_name}' [N,{','.join(map(str, shape))}]",
                        "give --metric-axis (e.g. 1 for [N,C,H,W], -1 for [N,H,W,C])")


