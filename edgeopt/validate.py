"""Validation of an artifact: run it through its own runner against the FP32 reference in ORT.

Figures: cosine (min/mean over samples and outputs), max abs error, top-1 agreement of output 0, and
the task metric (:mod:`edgeopt.metrics`, fitted to the output or named by ``--metric``) of both with its
drop: ``accuracy*`` when it is judged against labels, ``metric_*`` always, named in ``metric``. The
``max_accuracy_drop`` gate takes the labelled drop, else the drop vs FP32 on real (not synthetic) data
(points for % metrics; for
``sqnr`` the dB below its target, see ``edgeopt.metrics``); ``min_sqnr_db`` gates the SQNR itself. Gates (``max_accuracy_drop``,
``min_cosine``) that miss raise :class:`GateFailedError` (exit 5) with the figures in ``details``. The
``max_accuracy_drop`` gate judges by :func:`edgeopt.validation_model.within_bound`, the rule every INT8 search
confirms by: the upper confidence limit of the drop at ``--confidence`` (:mod:`edgeopt.metrics.confidence`) must
be within it; for a user's metric without per-sample scores, the drop and its value on 9 of 10 random halves of the
samples (:mod:`edgeopt.metrics.halves`).
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import numpy as np

from edgeopt.errors import GateFailedError
from edgeopt.metrics.halves import halves_drop, one_in
from edgeopt.validation_model import CheckedOn, Gate, Validation, counted_drop, holds_bound, sample_points

__all__ = ["CheckedOn", "Gate", "Validation", "check_gates", "check_task_metric", "counted_drop", "validate_artifact"]


def _judged(outputs: dict[str, np.ndarray], name: str | None, every: bool, names: list[str] | None = None) \
        -> dict[str, np.ndarray]:
    """Only the outputs the metric judges (``every``: all, under the reference's ``names`` in order where the
    runtime names them otherwise; else the first unless named): what is kept per sample."""
    if every:
        keys = list(outputs) if names is None or set(names) == set(outputs) else names
        return {k: np.asarray(v) for k, v in zip(keys, outputs.values(), strict=True)}
    key = name if name in outputs else next(iter(outputs))
    return {key: np.asarray(outputs[key])}


def validate_artifact(artifact_dir, reference_model, data, *, data_source: str, manifest: dict | None = None,
                      threads: int | None = None, max_accuracy_drop: float | None = None,
                      min_cosine: float | None = None, progress=None, metric=None, search_path=None,
                      confidence: float | None = None) -> Validation:
    """Compare the artifact with ``reference_model`` on ``data`` (an :class:`edgeopt.data.Dataset`);
    ``metric``: an :class:`edgeopt.metrics.MetricSpec` (None: chosen from the output and the labels);
    ``confidence``: of the drop's upper limit the ``max_accuracy_drop`` gate judges (None: the default)."""
    from edgeopt.converters.checks import compare
    from edgeopt.metric_choice import per_output
    from edgeopt.metrics import judges_every_output, metric_for_outputs, pinned_spec
    from edgeopt.metrics.custom import mark, spent_since
    from edgeopt.runtime.run_fn import run_fn
    from edgeopt.runtime.runners import open_runner

    metric_mark = mark()
    reference = run_fn(Path(reference_model), threads)
    seen: dict[str, dict] = {}

    def ref_fn(feed):
        seen["ref"] = reference(feed)
        return seen["ref"]

    with open_runner(str(artifact_dir), threads=threads, manifest=manifest) as runner:
        def got_fn(feed):
            seen["got"] = runner.run(feed)
            return seen["got"]

        n = len(data)
        cos_min, cos_means, max_abs, agree, ref_outs, got_outs = [], [], 0.0, [], [], []
        judged, every = getattr(metric, "output", None), None
        labels_find_output = judged is None and data.labels is not None  # kept: the labels' output is found from all
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
                if every is None:
                    every = judges_every_output(metric, data.labels, list(seen["ref"])) or labels_find_output
                ref_outs.append(_judged(seen["ref"], judged, every))
                got_outs.append(_judged(seen["got"], judged, every, list(seen["ref"])))
                if tick is not None:
                    tick.advance()
        checked_on = _checked_on(getattr(runner, "execution", None))
    v = Validation(
        samples=n,
        data_source=data_source,
        synthetic=bool(data.synthetic),
        cosine_min=min(cos_min) if cos_min else None,
        cosine_mean=float(np.mean(cos_means)) if cos_means else None,
        max_abs_err=max_abs,
        top1_agreement=float(np.mean(agree)) if agree else None,
        checked_on=checked_on,
    )
    m = metric_for_outputs(ref_outs, data.labels, metric, search_path=search_path,
                           role="eval" if data_source == "eval" else "calib")
    value = m.score_outputs(got_outs)
    v.metric, v.metric_description, v.metric_unit, v.metric_kind = m.name, m.description, m.unit, m.kind.value
    v.metric_basis = "labels" if m.labels_used else "fp32"
    v.metric_reference, v.metric_value = round(m.fp32_value, 4), round(value, 4)
    v.metric_drop = round(m.fp32_value - value, 4)
    v.metric_outputs = per_output(m, got_outs)
    if m.labels_used:
        v.accuracy_reference, v.accuracy, v.accuracy_drop = v.metric_reference, v.metric_value, v.metric_drop
    gates = _value_gates(v, m, metric, min_cosine)
    if max_accuracy_drop is not None:
        gates["max_accuracy_drop"] = _drop_gate(v, m, ref_outs, got_outs, data.labels, max_accuracy_drop, confidence,
                                                (manifest or {}).get("precision"), pinned_spec(metric, m),
                                                search_path)
    v.units = _units_gate(artifact_dir, manifest, gates)
    v.gates = gates
    v.metric_time = spent_since(metric_mark)
    return v


def _value_gates(v: Validation, m, metric, min_cosine: float | None) -> dict[str, Gate]:
    """The gates on a figure alone: ``min_sqnr_db`` (a dB metric) and ``min_cosine``."""
    gates = {}
    if metric is not None and getattr(metric, "min_sqnr_db", None) is not None and m.unit == "dB":
        gates["min_sqnr_db"] = Gate(threshold=metric.min_sqnr_db, value=v.metric_value,
                                    passed=v.metric_value >= metric.min_sqnr_db)
    if min_cosine is not None:
        gates["min_cosine"] = Gate(threshold=min_cosine, value=v.cosine_min,
                                   passed=v.cosine_min is not None and v.cosine_min >= min_cosine)
    return gates


def _drop_gate(v: Validation, m, ref_outs, got_outs, labels, bound: float, confidence, precision, spec,
               search_path) -> Gate:
    """The ``max_accuracy_drop`` gate: the drop (:func:`counted_drop`) judged by its upper confidence limit, or for
    a user's metric without per-sample scores by the halves rule (as the search judges it)."""
    drop, _ = counted_drop(v)
    v.sample_points = sample_points(m.kind, m.unit, v.samples)
    if drop is not None:
        _confidence_limit(v, m, got_outs, bound, confidence, precision)
    if drop is not None and v.drop_upper is None and m.per_sample is None:  # a user's metric: the halves rule
        v.halves_drop_p90 = halves_drop(ref_outs, got_outs, labels, spec, search_path)
    return Gate(threshold=bound, value=drop, passed=holds_bound(v, bound))


def _confidence_limit(v: Validation, m, got_outs: list, bound: float, confidence: float | None,
                      precision: str | None) -> None:
    """The drop's upper confidence limit (:func:`edgeopt.metrics.confidence.drop_upper`) into ``v``: the gate's
    judgement, as every INT8 search's. A float artifact (fp32, fp16, bf16) on an eval set too small for any
    confidence at that bound (a metric that counts samples) keeps the point rule: FP32 itself could not pass."""
    from edgeopt.metrics.confidence import DEFAULT_CONFIDENCE, counted_samples, drop_upper, samples_needed

    v.confidence = DEFAULT_CONFIDENCE if confidence is None else float(confidence)
    if (v.sample_points is not None or counted_samples(m)) and precision not in (None, "int8"):
        need = samples_needed(bound, v.confidence)
        if need is None or v.samples < need:
            return
    v.drop_upper = drop_upper(m, [m.digest(o) for o in got_outs], v.confidence)


def _checked_on(execution: dict | None) -> CheckedOn | None:
    """From the runner's ``execution`` record (edgeopt/runtime/runners/onnxruntime.py): which provider ran it."""
    if not execution or not execution.get("provider"):
        return None
    return CheckedOn(provider=execution["provider"], target=execution.get("target_provider") or execution["provider"],
                     why=execution.get("why"))


def _units_gate(artifact_dir, manifest: dict | None, gates: dict) -> dict | None:
    """Count the artifact's quantized and float units (every artifact); one labelled int8 must hold at least one
    quantized unit (the ``int8_quantized_units`` gate), else it is the FP32 model under an INT8 label."""
    from edgeopt.quant_units import count_units

    units = count_units(artifact_dir, (manifest or {}).get("runtime") or {})
    if units is not None and (manifest or {}).get("precision") == "int8" and units["quantized"] + units["float"]:
        gates["int8_quantized_units"] = Gate(threshold=1, value=units["quantized"], passed=units["quantized"] >= 1)
    return units


def check_gates(v: Validation) -> None:
    """Raise :class:`GateFailedError` (exit 5) naming every gate that missed."""
    missed = []
    for name, g in v.gates.items():
        if g.passed:
            continue
        unit = " dB" if v.metric_unit == "dB" else " pts" if v.metric_unit == "%" else ""
        if name == "max_accuracy_drop" and g.value is None:
            missed.append("accuracy drop could not be measured (no labels: give --eval with 'labels')")
        elif name == "max_accuracy_drop" and v.drop_upper is not None:
            missed.append(f"{v.metric} drop {g.value:.2f}{unit} on {v.samples} samples, up to {v.drop_upper:.2f}{unit} "
                          f"at {v.confidence:g} confidence > {g.threshold} ({v.metric_reference:.2f} -> "
                          f"{v.metric_value:.2f})")
        elif name == "max_accuracy_drop":
            room = (f" (one of the {v.samples} samples, {v.sample_points:.3g}{unit}, is kept as room)"
                    if v.sample_points and g.value <= g.threshold else "")
            if v.halves_drop_p90 is not None and g.value <= g.threshold + 1e-9:
                missed.append(f"{v.metric} drop {g.value:.2f}{unit} on all {v.samples} samples but "
                              f"{v.halves_drop_p90:.2f}{unit} > {g.threshold} on 1 in {one_in()} of their random "
                              "halves: the eval data can't show it holds")
            else:
                missed.append(f"{v.metric} drop {g.value:.2f}{unit} > {g.threshold}{room} "
                              f"({v.metric_reference:.2f} -> {v.metric_value:.2f})")
        elif name == "int8_quantized_units":
            u = v.units or {}
            missed.append(f"the artifact is labelled int8 but none of the {u.get('float')} compute ops in "
                          f"{u.get('file')} is quantized (it is the FP32 model)")
        elif name == "min_sqnr_db":
            missed.append(f"SQNR {g.value:.2f} dB < --min-sqnr-db {g.threshold}")
        else:
            missed.append(f"cosine {g.value if g.value is None else round(g.value, 6)} < {g.threshold}")
    no_int8 = "int8_quantized_units" in v.gates and not v.gates["int8_quantized_units"].passed
    hint = ("every compute op was left in float (by the INT8 search or nodes_to_exclude): --precision fp32 gives "
            "the same model under its true label"
            if no_int8 else "relax the gate, give better calibration data, or use a higher precision")
    if missed:
        raise GateFailedError(
            "gate failed: " + "; ".join(missed) + f" on {v.samples} {v.data_source} samples",
            "nothing was written; " + hint,
            details={"validation": v.model_dump(mode="json")},
        )


def check_task_metric(model_path, input_shapes, data, data_source: str, spec=None, search_path=None,
                      threads: int | None = None):
    """Before any work: the labels checked against what the model outputs (range, shape, one-hot
    converted, FP32 not at or below chance) and a user's ``--metric MODULE:FUNCTION`` imported and run, by
    running the FP32 model once on ``data`` in ONNX Runtime. Without labels or a metric spec nothing runs.
    Returns the metric (None when skipped); bad labels or a bad metric path raise exit 3."""
    from edgeopt.errors import EdgeoptError
    from edgeopt.metrics import metric_for_outputs
    from edgeopt.runtime.run_fn import run_fn

    if data is None or (data.labels is None and spec is None):
        return None
    try:
        run = run_fn(Path(model_path), threads)
        outputs = [run(feed) for feed in data.feeds()]
    except EdgeoptError:
        raise
    except Exception:  # noqa: BLE001 - a model ORT can't run as given is reported by the chain, with context
        return None
    del input_shapes  # the data already has the shapes the model is run at
    return metric_for_outputs(outputs, data.labels, spec, search_path=search_path,
                              role="eval" if data_source == "eval" else "calib")
