"""The metric flags' rules (``--metric-axis``, ``--ctc-blank``, ``--min-sqnr-db``, ``--metric-threshold``):
which metric each applies to, checked against the output it would judge (see ``edgeopt/applicability.py``,
the one place a run's flags are checked before any work; this part lives with the metrics so that choosing a
metric can check the chosen one without importing the chain)."""

from __future__ import annotations

from edgeopt.errors import BadInputError, UsageError

# the metric kinds each metric flag applies to (MetricName values)
_AXIS_KINDS = ("position_agreement", "ctc")
_THRESHOLD_KINDS = ("top1", "map_iou", "heatmap_peaks")  # top1: only a one-value output's decision


def _given(spec, field: str) -> bool:
    return spec is not None and field in spec.model_fields_set and getattr(spec, field) is not None


def _dims(sample_shape: tuple) -> str:
    return "[N" + "".join(f",{d}" for d in sample_shape) + "]"


def check_metric_flags(spec, kind, sample_shape: tuple, out_name: str | None) -> None:
    """Refuse a metric flag that can't apply to ``kind`` (a ``MetricName``; None: not known yet, only the
    output's rank is checked) on the output ``out_name`` of one sample's shape ``sample_shape`` (without the
    batch axis; dims may be symbolic)."""
    if spec is None:
        return
    kind = None if kind is None else str(getattr(kind, "value", kind))
    rank = len(sample_shape)
    where = f"output '{out_name}' {_dims(sample_shape)}"
    if kind == "ctc" and rank < 2:
        raise BadInputError(f"--metric ctc needs sequence logits [N,T,C] (a class per time step); {where} has no "
                            "time axis", "for a classifier use --metric top1, or leave --metric out")
    if _given(spec, "axis") and (rank < 2 or (kind is not None and kind not in _AXIS_KINDS)):
        why = f"this run judges {where} with the metric {kind}" if rank >= 2 else \
            f"{where} is {rank + 1}-D, with no class axis to name"
        raise UsageError(f"--metric-axis {spec.axis} does not apply: {why}; it names the class axis of [N,T,C] or "
                         "[N,C,H,W] outputs (metrics position_agreement, ctc)", "drop --metric-axis")
    if _given(spec, "ctc_blank") and kind is not None and kind != "ctc":
        raise UsageError(f"--ctc-blank {spec.ctc_blank} does not apply: this run's metric is {kind}, not ctc",
                         "drop --ctc-blank, or give --metric ctc")
    if _given(spec, "min_sqnr_db") and kind is not None and kind != "sqnr":
        raise UsageError(f"--min-sqnr-db {spec.min_sqnr_db:g} does not apply: it gates the sqnr metric and this "
                         f"run's metric is {kind}, so no SQNR gate would run",
                         "give --metric sqnr with it, or use --max-accuracy-drop for this metric")
    one_value = rank == 0 or all(isinstance(d, int) and d == 1 for d in sample_shape)
    if _given(spec, "threshold") and kind is not None and (kind not in _THRESHOLD_KINDS
                                                           or (kind == "top1" and not one_value)):
        raise UsageError(f"--metric-threshold {spec.threshold:g} does not apply: this run judges {where} with "
                         f"the metric {kind}; it is the decision threshold of a one-value output (top1), of a "
                         "map (map_iou) or of a heatmap's peak (heatmap_peaks)", "drop --metric-threshold")


def declared_kind(spec):
    """The metric kind the spec fixes before any output is seen (None: chosen from FP32's outputs)."""
    from edgeopt.metrics.base import MetricName

    if spec is None:
        return None
    if spec.name is not None:
        return spec.name
    return MetricName.SQNR if _given(spec, "min_sqnr_db") else None


def check_metric_against_outputs(spec, outputs) -> None:
    """:func:`check_metric_flags` before FP32 has run: the kind the spec fixes (if any) and the judged output's
    rank from the graph (``outputs``: ``edgeopt.model.TensorSpec``, batch axis first)."""
    if spec is None or not outputs:
        return
    from .overrides import check_output_names

    check_output_names(spec, [o.name for o in outputs])  # --metric-output / OUTPUT=KIND: an output of the model
    out = next((o for o in outputs if o.name == spec.output), outputs[0])
    shape = tuple(out.shape[1:]) if len(out.shape) >= 1 else ()
    check_metric_flags(spec, declared_kind(spec), shape, out.name)
