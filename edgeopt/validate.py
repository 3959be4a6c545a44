"""Validation of an artifact: run it through its own runner against the FP32 reference in ORT.

Figures: cosine (min/mean over samples and outputs), max abs error, top-1 agreement of output 0,
and with labels the top-1 accuracy of both and the drop in points. Gates (``max_accuracy_drop``,
``min_cosine``) that miss raise :class:`GateFailedError` (exit 5) with the figures in ``details``.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from edgeopt.errors import GateFailedError


class Gate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    threshold: float
    value: float | None
    passed: bool


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
    gates: dict[str, Gate] = {}

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates.values())


def _top1(outputs: dict[str, np.ndarray]) -> np.ndarray:
    first = np.asarray(next(iter(outputs.values())))
    return np.argmax(first.reshape(-1, first.shape[-1]), axis=-1)


def validate_artifact(artifact_dir, reference_model, data, *, data_source: str, manifest: dict | None = None,
                      threads: int | None = None, max_accuracy_drop: float | None = None,
                      min_cosine: float | None = None, progress=None) -> Validation:
    """Compare the artifact with ``reference_model`` on ``data`` (an :class:`edgeopt.data.Dataset`)."""
    from edgeopt.converters.checks import compare, ort_run_fn
    from edgeopt.runtime.runners import open_runner

    reference = ort_run_fn(Path(reference_model), threads)
    seen: dict[str, dict] = {}

    def ref_fn(feed):
        seen["ref"] = reference(feed)
        return seen["ref"]

    with open_runner(str(artifact_dir), threads=threads, manifest=manifest) as runner:
        def got_fn(feed):
            seen["got"] = runner.run(feed)
            return seen["got"]

        n = len(data)
        cos_min, cos_means, max_abs, agree = [], [], 0.0, []
        correct_ref = correct_got = labelled = 0
        bar = progress("validating", n) if progress else nullcontext()
        with bar as tick:
            for i in range(n):
                r = compare(ref_fn, got_fn, [data.feed(i)])
                if r["cosine_min"] is not None:
                    cos_min.append(r["cosine_min"])
                    cos_means.append(r["cosine_mean"])
                max_abs = max(max_abs, r["max_abs_err"])
                if r["top1_agreement"] is not None:
                    agree.append(r["top1_agreement"])
                if data.labels is not None:
                    label = np.asarray(data.labels[i]).reshape(-1)
                    p_ref, p_got = _top1(seen["ref"]), _top1(seen["got"])
                    if len(p_ref) == len(label):
                        correct_ref += int(np.sum(p_ref == label))
                        correct_got += int(np.sum(p_got == label))
                        labelled += len(label)
                if tick is not None:
                    tick.advance()
    v = Validation(
        samples=n,
        data_source=data_source,
        synthetic=bool(data.synthetic),
        cosine_min=min(cos_min) if cos_min else None,
        cosine_mean=float(np.mean(cos_means)) if cos_means else None,
        max_abs_err=max_abs,
        top1_agreement=float(np.mean(agree)) if agree else None,
    )
    if labelled:
        acc_ref = 100.0 * correct_ref / labelled
        acc = 100.0 * correct_got / labelled
        v.accuracy_reference, v.accuracy, v.accuracy_drop = round(acc_ref, 4), round(acc, 4), round(acc_ref - acc, 4)
    gates = {}
    if min_cosine is not None:
        gates["min_cosine"] = Gate(threshold=min_cosine, value=v.cosine_min,
                                   passed=v.cosine_min is not None and v.cosine_min >= min_cosine)
    if max_accuracy_drop is not None:
        gates["max_accuracy_drop"] = Gate(threshold=max_accuracy_drop, value=v.accuracy_drop,
                                          passed=v.accuracy_drop is not None and v.accuracy_drop <= max_accuracy_drop)
    v.gates = gates
    return v


def check_gates(v: Validation) -> None:
    """Raise :class:`GateFailedError` (exit 5) naming every gate that missed."""
    missed = []
    for name, g in v.gates.items():
        if g.passed:
            continue
        if name == "max_accuracy_drop" and g.value is None:
            missed.append("accuracy drop could not be measured (no labels: give --eval with 'labels')")
        elif name == "max_accuracy_drop":
            missed.append(f"accuracy drop {g.value:.2f} pts > {g.threshold} ({v.accuracy_reference:.2f}% -> {v.accuracy:.2f}%)")
        else:
            missed.append(f"cosine {g.value if g.value is None else round(g.value, 6)} < {g.threshold}")
    if missed:
        raise GateFailedError(
            "gate failed: " + "; ".join(missed) + f" on {v.samples} {v.data_source} samples",
            "nothing was written; relax the gate, give better calibration data, or use a higher precision",
            details={"validation": v.model_dump(mode="json")},
        )
