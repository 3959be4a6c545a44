"""Why a model will be slow on a named device, before anything is converted.

``analyze_model(model, profile)`` loads the ONNX model, fixes its input shapes, finds every
intermediate shape, counts FLOPs and bytes per node (:mod:`.costs`), predicts latency with a
roofline on each compute unit of the profile (:mod:`.roofline`), asks each listed backend what it
would refuse (:mod:`.preflight`) and derives recommendations (:mod:`.recommend`).
All latencies are **estimates** (``AnalysisResult.estimate`` is always True).
"""

from __future__ import annotations

import os
from pathlib import Path

from edgeopt.analyze.result import (
    AnalysisResult,
    Bound,
    CostModel,
    OpCost,
    OpTypeShare,
    PreflightIssue,
    Recommendation,
    TensorInfo,
    Totals,
    UnitPrediction,
)
from edgeopt.profiles import DeviceProfile

__all__ = [
    "analyze_model", "AnalysisResult", "OpCost", "UnitPrediction", "Recommendation", "PreflightIssue", "Bound",
]

NOTES = [
    "All latencies are roofline estimates, not measurements: per op max(FLOPs/peak, bytes/bandwidth), summed.",
    "FLOPs count a multiply-accumulate as 2; bias additions are not counted; transcendental ops use "
    "documented per-element weights (cost_model 'approx').",
    "Bytes count weights + activations read + written by each op once (no cache reuse); INT8/FP16 rows count "
    "every float tensor at 1/2 bytes and every op at the unit's INT8/FP16 peak (an upper bound on the gain).",
    "Every tensor is assumed to come from DRAM: small models whose activations stay in cache run faster "
    "than their memory-bound roofline says.",
    "Peaks are rarely reached: estimate_ms = roofline_ms / efficiency + executed ops x per-op overhead.",
]


def _load(model_path_or_proto) -> tuple[object, str, int | None]:
    from edgeopt.model import check_model, load_onnx

    if isinstance(model_path_or_proto, (str, os.PathLike)):
        p = Path(model_path_or_proto)
        return load_onnx(p), str(p), p.stat().st_size
    check_model(model_path_or_proto, "model")
    return model_path_or_proto, "<in-memory model>", None


def _shapes_arg(input_shapes) -> dict[str, tuple[int, ...]]:
    from edgeopt.model import parse_input_shapes

    if input_shapes is None:
        return {}
    if isinstance(input_shapes, dict):
        return {k: tuple(int(d) for d in v) for k, v in input_shapes.items()}
    return parse_input_shapes(list(input_shapes))


def _totals(model, metas, ops: list[OpCost], profile: DeviceProfile, file_bytes: int | None) -> Totals:
    params = [m for m in metas.values() if m.is_param]
    param_bytes = sum(m.nbytes for m in params)
    act = sum(op.act_write_bytes for op in ops if op.cost_model != CostModel.VIEW)
    total_bytes = sum(o.bytes_fp32 for o in ops)
    flops = sum(o.flops for o in ops)
    peak_act = max((o.act_read_bytes + o.act_write_bytes for o in ops), default=0)
    mem = profile.memory.ram_bytes
    return Totals(
        nodes=len(ops), flops=flops, macs=sum(o.macs for o in ops), params=sum(m.numel for m in params),
        param_bytes=param_bytes, activation_bytes=act, peak_activation_bytes=peak_act, bytes_fp32=total_bytes,
        bytes_int8=sum(o.bytes_int8 for o in ops), intensity=round(flops / total_bytes, 4) if total_bytes else 0.0,
        model_file_bytes=file_bytes, memory_bytes=mem, memory_share=round((param_bytes + peak_act) / mem, 6),
    )


def _op_types(ops: list[OpCost]) -> list[OpTypeShare]:
    total = sum(o.time_us for o in ops) or 1e-12
    groups: dict[str, list[OpCost]] = {}
    for o in ops:
        groups.setdefault(o.op_type, []).append(o)
    rows = [
        OpTypeShare(op_type=t, count=len(g), flops=sum(o.flops for o in g), bytes_fp32=sum(o.bytes_fp32 for o in g),
                    time_us=round(sum(o.time_us for o in g), 4), time_share=round(sum(o.time_us for o in g) / total, 4))
        for t, g in groups.items()
    ]
    return sorted(rows, key=lambda r: -r.time_us)


def analyze_model(
    model_path_or_proto,
    profile: DeviceProfile,
    input_shapes=None,
    *,
    top: int = 10,
    efficiency: float = 1.0,
    overhead_us_per_op: float | None = None,
    preflight: bool = True,
) -> AnalysisResult:
    """Roofline analysis of an ONNX model (path or ``ModelProto``) on ``profile``.

    ``input_shapes``: ``{"x": (1, 3, 224, 224)}`` or ``["x=1x3x224x224"]``; needed for dynamic inputs.
    ``efficiency`` (0-1] scales the pure roofline into ``estimate_ms``; ``overhead_us_per_op`` adds a
    per-op dispatch cost (default :data:`edgeopt.analyze.roofline.DEFAULT_OVERHEAD_US_PER_OP`).
    """
    from edgeopt.analyze import roofline
    from edgeopt.analyze.costs import graph_costs
    from edgeopt.analyze.preflight import run_preflight
    from edgeopt.analyze.recommend import recommend
    from edgeopt.analyze.shapes import resolve_shapes
    from edgeopt.errors import UsageError
    from edgeopt.model import batch_defaults, fix_input_shapes, graph_inputs

    if not 0 < efficiency <= 1:
        raise UsageError(f"efficiency {efficiency} is outside (0, 1]", "use e.g. --efficiency 0.3")
    if overhead_us_per_op is None:
        overhead_us_per_op = roofline.DEFAULT_OVERHEAD_US_PER_OP
    original, origin, file_bytes = _load(model_path_or_proto)
    shapes = _shapes_arg(input_shapes)
    fixed = fix_input_shapes(original, {**batch_defaults(original, shapes), **shapes}, origin=origin)
    metas, source, unknown = resolve_shapes(fixed, origin)
    ops = graph_costs(fixed, metas)

    unit_kind = profile.preferred_backend.unit
    unit = profile.unit(unit_kind)
    predictions = roofline.predict_all(ops, profile, efficiency=efficiency, overhead_us_per_op=overhead_us_per_op)
    ops = roofline.annotate(ops, unit, profile)
    totals = _totals(fixed, metas, ops, profile, file_bytes)
    primary = [p for p in predictions if p.unit == unit_kind]
    first = primary[0] if primary else None
    notes = list(NOTES)
    unknown_types = sorted({o.op_type for o in ops if o.cost_model == CostModel.UNKNOWN})
    if unknown_types:
        notes.append(f"no FLOP formula for {', '.join(unknown_types)}: counted as 1 op per output element")
    if unknown:
        notes.append(f"{len(unknown)} tensor(s) have unknown shapes; their ops are under-counted")
    if any(n.op_type in ("If", "Loop", "Scan") for n in fixed.graph.node):
        notes.append("an If counts its heavier branch; a Loop/Scan body is counted once (trip count unknown)")
    return AnalysisResult(
        model=origin,
        profile=profile.name,
        profile_detected=profile.detected,
        primary_unit=unit_kind,
        shape_source=source,
        inputs=[TensorInfo(name=s.name, shape=list(s.shape), dtype=s.dtype) for s in graph_inputs(fixed)],
        totals=totals,
        predictions=predictions,
        memory_bound_share=first.memory_bound_share if first else 0.0,
        op_types=_op_types(ops),
        heaviest=sorted(ops, key=lambda o: -o.time_us)[: max(top, 0)],
        ops=ops,
        recommendations=recommend(fixed, ops, totals, primary, profile),
        preflight=run_preflight(fixed, original, profile, unknown) if preflight else [],
        notes=notes,
    )
