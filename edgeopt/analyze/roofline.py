"""Roofline predictions of a graph's latency on each compute unit of a device profile.

Per op: ``time = max(FLOPs / peak(unit, precision), bytes(precision) / memory bandwidth)``;
the model's latency is the sum over ops (ops run one after another; no overlap between ops).
At FP16/INT8 every float tensor (weights and activations) is counted at 2/1 byte an element and
every op runs at the unit's FP16/INT8 peak: an upper bound on what quantization can give.

This is the *pure* roofline, and peaks are rarely reached: ``efficiency`` (0-1, default 1 = pure)
divides it, and ``overhead_us_per_op`` adds a fixed runtime dispatch cost per executed op
(kernel launch, scheduling); both are estimates and are reported beside the pure figure.
"""

from __future__ import annotations

from edgeopt.analyze.result import Bound, CostModel, OpCost, UnitPrediction
from edgeopt.enums import Precision
from edgeopt.profiles import ComputeUnit, DeviceProfile

# A typical CPU runtime's cost to dispatch one op (ONNX Runtime / TFLite on an A76-class or x86 core),
# an order-of-magnitude estimate; override with ``overhead_us_per_op``.
DEFAULT_OVERHEAD_US_PER_OP = 1.0

_PRECISIONS = (Precision.FP32, Precision.FP16, Precision.INT8)


def op_bytes(op: OpCost, precision: Precision) -> int:
    return {Precision.FP32: op.bytes_fp32, Precision.FP16: op.bytes_fp16, Precision.INT8: op.bytes_int8}[precision]


def op_time_s(op: OpCost, peak_gops: float, bandwidth_gbps: float, precision: Precision) -> tuple[float, float]:
    """(compute seconds, memory seconds) of one op."""
    return op.flops / (peak_gops * 1e9), op_bytes(op, precision) / (bandwidth_gbps * 1e9)


def executed(op: OpCost) -> bool:
    """Whether a runtime executes the op as a kernel (views and constants are free)."""
    return op.cost_model not in (CostModel.VIEW, CostModel.FOLDED)


def predict(
    ops: list[OpCost],
    unit: ComputeUnit,
    profile: DeviceProfile,
    precision: Precision,
    *,
    efficiency: float = 1.0,
    overhead_us_per_op: float = DEFAULT_OVERHEAD_US_PER_OP,
) -> UnitPrediction | None:
    peak = unit.peak_gops.for_precision(precision)
    if peak is None:
        return None
    bw = profile.memory.bandwidth_gbps
    total = compute = memory = mem_bound = 0.0
    for op in ops:
        c, m = op_time_s(op, peak, bw, precision)
        t = max(c, m)
        total += t
        compute += c
        memory += m
        if m > c:
            mem_bound += t
    n_exec = sum(1 for op in ops if executed(op))
    overhead_ms = n_exec * overhead_us_per_op / 1000
    roofline_ms = total * 1000
    return UnitPrediction(
        unit=unit.kind,
        unit_name=unit.name,
        precision=precision,
        peak_gops=peak,
        bandwidth_gbps=bw,
        ridge_flops_per_byte=round(peak / bw, 3),
        roofline_ms=round(roofline_ms, 6),
        compute_ms=round(compute * 1000, 6),
        memory_ms=round(memory * 1000, 6),
        memory_bound_share=round(mem_bound / total, 4) if total else 0.0,
        efficiency=efficiency,
        overhead_ms=round(overhead_ms, 6),
        estimate_ms=round(roofline_ms / efficiency + overhead_ms, 6),
    )


def predict_all(
    ops: list[OpCost], profile: DeviceProfile, *, efficiency: float = 1.0,
    overhead_us_per_op: float = DEFAULT_OVERHEAD_US_PER_OP,
) -> list[UnitPrediction]:
    out = []
    for unit in profile.compute_units:
        for prec in _PRECISIONS:
            p = predict(ops, unit, profile, prec, efficiency=efficiency, overhead_us_per_op=overhead_us_per_op)
            if p is not None:
                out.append(p)
    return out


def annotate(ops: list[OpCost], unit: ComputeUnit, profile: DeviceProfile) -> list[OpCost]:
    """Copies of ``ops`` with ``time_us`` and ``bound`` on ``unit`` at FP32 (or its lowest precision)."""
    prec = primary_precision(unit)
    out = []
    for op in ops:
        if prec is None:
            out.append(op)
            continue
        c, m = op_time_s(op, unit.peak_gops.for_precision(prec), profile.memory.bandwidth_gbps, prec)
        bound = Bound.NONE if c == m == 0 else (Bound.MEMORY if m > c else Bound.COMPUTE)
        out.append(op.model_copy(update={"time_us": round(max(c, m) * 1e6, 4), "bound": bound}))
    return out


def primary_precision(unit: ComputeUnit) -> Precision | None:
    return next((p for p in _PRECISIONS if unit.peak_gops.for_precision(p) is not None), None)
