"""The validation's result: :class:`Validation` (what ``edgeopt.validate`` measures, stored as the manifest's
``validation``), its gates, where it ran, and :func:`counted_drop`, the one rule for the drop the gates count.

A small module without numpy or runtimes, so :mod:`edgeopt.artifact` can type ``Manifest.validation`` with it;
:mod:`edgeopt.validate` re-exports these names.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Gate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    threshold: float
    value: float | None
    passed: bool


class CheckedOn(BaseModel):
    """Where the artifact was validated: the provider that ran it here and the one it is built for (ONNX Runtime's
    runner records both); ``why`` says why they differ (e.g. no TensorRT on this machine), None when they don't."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    provider: str
    target: str
    why: str | None = None


class Validation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    samples: int
    data_source: str  # "eval", "calib-holdout" or "synthetic"
    synthetic: bool
    cosine_min: float | None = None
    cosine_mean: float | None = None
    max_abs_err: float | None = None
    top1_agreement: float | None = None
    accuracy_reference: float | None = None  # top-1 %, FP32 reference in ONNX Runtime
    accuracy: float | None = None  # top-1 %, the artifact
    accuracy_drop: float | None = None  # points
    metric: str | None = None  # the task metric's name, e.g. "ctc_exact_match_vs_fp32"
    metric_description: str | None = None
    metric_unit: str | None = None  # "%" or "dB"
    metric_basis: str | None = None  # "labels" or "fp32"
    metric_reference: float | None = None  # FP32 in ONNX Runtime (for sqnr: the target in dB)
    metric_value: float | None = None  # the artifact
    metric_drop: float | None = None  # reference - value
    # compute units of the artifact's model: {"quantized", "float", "file"} (edgeopt.quant_units); None: not read
    units: dict | None = None
    checked_on: CheckedOn | None = None  # the runner's provider vs the artifact's (None: the runner records none)
    gates: dict[str, Gate] = {}

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates.values())


def counted_drop(v: Validation | dict | None) -> tuple[float | None, bool]:
    """The one rule for the drop ``--max-accuracy-drop`` counts (the convert gate, the pipeline's gate,
    ``optimize``): against labels when the eval data has them, else the task metric's drop vs FP32 on real data
    (as the INT8 searches judge it), never on synthetic inputs (None). ``v``: a Validation or its JSON (None: not
    validated). Returns (drop, whether it is vs FP32)."""
    if v is None:
        return None, False
    get = v.get if isinstance(v, dict) else (lambda key: getattr(v, key))
    if get("accuracy_drop") is not None:
        return get("accuracy_drop"), False
    if get("synthetic") or get("metric_drop") is None:
        return None, False
    return get("metric_drop"), True
