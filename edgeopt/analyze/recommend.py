"""Recommendations that follow from the roofline numbers, each with an expected gain (an estimate)."""

from __future__ import annotations

from edgeopt.analyze.result import Bound, OpCost, Recommendation, RecommendationKind, Totals, UnitPrediction
from edgeopt.enums import Precision
from edgeopt.profiles import DeviceProfile

FOLDABLE_PRODUCERS = {"Conv", "ConvTranspose", "Gemm"}
DEPTHWISE_SHARE = 0.25  # depthwise convs taking more than this share of time are called out
LARGE_FC_BYTES = 1 << 20  # a Gemm/MatMul weight of 1 MiB or more
LARGE_FC_SHARE = 0.3  # ... and such weights are more than this share of all parameter bytes
INT8_MIN_SPEEDUP = 1.2
BATCH_FOR_OVERHEAD = 8


def _mb(n: int | float) -> str:
    return f"{n / 1e6:.2f} MB"


def _speedup(total_us: float, saved_us: float) -> float | None:
    left = total_us - saved_us
    return round(total_us / left, 3) if left > 0 else None


def bn_after_conv(model) -> list[str]:
    """Names of BatchNormalization nodes whose input comes only from a Conv/ConvTranspose/Gemm."""
    producer = {o: n for n in model.graph.node for o in n.output}
    consumers: dict[str, int] = {}
    for n in model.graph.node:
        for i in n.input:
            consumers[i] = consumers.get(i, 0) + 1
    out = []
    for n in model.graph.node:
        if n.op_type != "BatchNormalization" or not n.input:
            continue
        p = producer.get(n.input[0])
        if p is not None and p.op_type in FOLDABLE_PRODUCERS and consumers.get(n.input[0], 0) == 1:
            out.append(n.name or f"BatchNormalization:{n.output[0]}")
    return out


def recommend(
    model, ops: list[OpCost], totals: Totals, primary: list[UnitPrediction], profile: DeviceProfile
) -> list[Recommendation]:
    """``ops`` carry ``time_us`` on the primary unit; ``primary`` are that unit's predictions."""
    total_us = sum(o.time_us for o in ops) or 1e-12
    by_prec = {p.precision: p for p in primary}
    fp32, int8 = by_prec.get(Precision.FP32), by_prec.get(Precision.INT8)
    found = (
        _quantize_int8(ops, totals, fp32, int8),
        _fold_batchnorm(model, ops, total_us),
        _depthwise_dominates(ops, totals, total_us),
        _large_fc(ops, totals, total_us),
        _recurrent(ops, total_us),
        _too_large_for_memory(totals, profile),
        _overhead_bound(totals, fp32),
    )
    return [r for r in found if r is not None]


def _quantize_int8(ops: list[OpCost], totals: Totals, fp32: UnitPrediction | None,
                   int8: UnitPrediction | None) -> Recommendation | None:
    if not (fp32 and int8 and int8.estimate_ms > 0):
        return None
    speed = fp32.estimate_ms / int8.estimate_ms  # with per-op overhead, which INT8 does not remove
    if speed < INT8_MIN_SPEEDUP:
        return None
    why = (f"{fp32.memory_bound_share:.0%} of the time is memory-bound, and INT8 cuts weight and "
           "activation bytes ~4x" if fp32.memory_bound_share >= 0.5
           else f"the model is mostly compute-bound and the unit's INT8 peak is "
                f"{int8.peak_gops / fp32.peak_gops:.1f}x its FP32 peak")
    return Recommendation(
        kind=RecommendationKind.QUANTIZE_INT8, title="Quantize to INT8",
        detail=f"{why}: roofline {fp32.roofline_ms:.3f} ms at FP32 vs {int8.roofline_ms:.3f} ms at INT8 "
               f"on {fp32.unit.value} ({fp32.estimate_ms:.3f} vs {int8.estimate_ms:.3f} ms with per-op "
               "overhead). Check accuracy after quantizing.",
        expected_gain=f"up to {speed:.1f}x faster (estimate)", speedup=round(speed, 3),
        bytes_saved=totals.bytes_fp32 - totals.bytes_int8, ops_affected=len(ops),
    )


def _fold_batchnorm(model, ops: list[OpCost], total_us: float) -> Recommendation | None:
    bns = bn_after_conv(model)
    if not bns:
        return None
    names = set(bns)
    bn_ops = [o for o in ops if o.name in names]
    saved_us = sum(o.time_us for o in bn_ops)
    sp = _speedup(total_us, saved_us)
    return Recommendation(
        kind=RecommendationKind.FOLD_BATCHNORM, title=f"Fold {len(bns)} BatchNorm(s) into the preceding Conv/Gemm",
        detail=f"{len(bns)} BatchNormalization node(s) follow a Conv/Gemm and can be folded into its weights "
               f"(edgeopt's normalize stage / onnxslim do it): saves {_mb(sum(o.bytes_fp32 for o in bn_ops))} "
               f"of traffic and {sum(o.flops for o in bn_ops):,} FLOPs.",
        expected_gain=f"{saved_us / total_us:.1%} of the predicted time" + (f" ({sp:.2f}x)" if sp else ""),
        speedup=sp, bytes_saved=sum(o.bytes_fp32 for o in bn_ops), flops_saved=sum(o.flops for o in bn_ops),
        ops_affected=len(bns), ops=bns[:20],
    )


def _depthwise_dominates(ops: list[OpCost], totals: Totals, total_us: float) -> Recommendation | None:
    dw = [o for o in ops if o.depthwise]
    dw_us = sum(o.time_us for o in dw)
    if not dw or dw_us / total_us < DEPTHWISE_SHARE:
        return None
    mem = sum(1 for o in dw if o.bound == Bound.MEMORY)
    dw_flops = sum(o.flops for o in dw)
    return Recommendation(
        kind=RecommendationKind.DEPTHWISE_DOMINATES, title="Depthwise convolutions dominate the time",
        detail=f"{len(dw)} depthwise conv(s) take {dw_us / total_us:.0%} of the predicted time for "
               f"{dw_flops / max(totals.flops, 1):.0%} of the FLOPs; {mem} of them are memory-bound "
               f"(intensity {min(o.intensity for o in dw):.2f}-{max(o.intensity for o in dw):.2f} FLOP/byte). "
               "INT8 (fewer bytes) and fusing them with the following pointwise conv help; more FLOPs don't matter.",
        expected_gain=f"INT8 cuts their bytes ~4x: up to {dw_us / 1000 * 0.75:.3f} ms of {total_us / 1000:.3f} ms",
        speedup=_speedup(total_us, dw_us * 0.75), ops_affected=len(dw), ops=[o.name for o in dw[:20]],
    )


def _large_fc(ops: list[OpCost], totals: Totals, total_us: float) -> Recommendation | None:
    fcs = [o for o in ops if o.op_type in ("Gemm", "MatMul") and o.param_bytes >= LARGE_FC_BYTES]
    fc_bytes = sum(o.param_bytes for o in fcs)
    if not fcs or fc_bytes < LARGE_FC_SHARE * max(totals.param_bytes, 1):
        return None
    fc_us = sum(o.time_us for o in fcs)
    return Recommendation(
        kind=RecommendationKind.LARGE_FC, title="Large fully-connected weights",
        detail=f"{len(fcs)} Gemm/MatMul op(s) hold {_mb(fc_bytes)} of weights "
               f"({fc_bytes / max(totals.param_bytes, 1):.0%} of all parameters) and take "
               f"{fc_us / total_us:.0%} of the time; at batch 1 they are weight-bandwidth bound. "
               "INT8 weights, pruning or a low-rank factorisation shrink them.",
        expected_gain=f"INT8 weights save {_mb(fc_bytes * 3 // 4)} (estimate)",
        speedup=_speedup(total_us, fc_us * 0.75), bytes_saved=fc_bytes * 3 // 4, ops_affected=len(fcs),
        ops=[o.name for o in fcs[:20]],
    )


def _recurrent(ops: list[OpCost], total_us: float) -> Recommendation | None:
    rnn = [o for o in ops if o.op_type in ("LSTM", "GRU", "RNN")]
    if not rnn:
        return None
    rnn_us = sum(o.time_us for o in rnn)
    return Recommendation(
        kind=RecommendationKind.RECURRENT, title=f"Recurrent layers ({', '.join(sorted({o.op_type for o in rnn}))})",
        detail=f"{len(rnn)} recurrent op(s) take {rnn_us / total_us:.0%} of the predicted time. Static INT8 of "
               "a recurrent state often breaks accuracy: use dynamic INT8 for their MatMuls or keep them float, "
               "and validate the outputs.",
        expected_gain=f"at most {rnn_us / 1000:.3f} ms of {total_us / 1000:.3f} ms is in them (estimate)",
        ops_affected=len(rnn), ops=[o.name for o in rnn[:20]],
    )


def _too_large_for_memory(totals: Totals, profile: DeviceProfile) -> Recommendation | None:
    need = totals.param_bytes + totals.peak_activation_bytes
    if need <= 0.5 * totals.memory_bytes:
        return None
    over = need > totals.memory_bytes
    return Recommendation(
        kind=RecommendationKind.TOO_LARGE_FOR_MEMORY,
        title="Model larger than the device memory" if over else "Model takes most of the device memory",
        detail=f"parameters {_mb(totals.param_bytes)} + peak activations {_mb(totals.peak_activation_bytes)} "
               f"= {need / totals.memory_bytes:.0%} of {profile.name}'s {_mb(totals.memory_bytes)}. "
               "INT8 weights need a quarter of the space; pruning shrinks it further.",
        expected_gain=f"INT8 weights: {_mb(totals.param_bytes // 4)} instead of {_mb(totals.param_bytes)}",
        bytes_saved=totals.param_bytes * 3 // 4,
    )


def _overhead_bound(totals: Totals, fp32: UnitPrediction | None) -> Recommendation | None:
    if not (fp32 and fp32.overhead_ms > fp32.roofline_ms):
        return None
    b = BATCH_FOR_OVERHEAD
    per_sample = (fp32.roofline_ms * b + fp32.overhead_ms) / b
    sp = (fp32.roofline_ms + fp32.overhead_ms) / per_sample
    return Recommendation(
        kind=RecommendationKind.OVERHEAD_BOUND, title="Tiny model: runtime overhead dominates",
        detail=f"the roofline time ({fp32.roofline_ms * 1000:.1f} us) is below the estimated dispatch overhead "
               f"of its {totals.nodes} ops ({fp32.overhead_ms * 1000:.1f} us): quantization will not help much. "
               "Batch inputs, fuse ops (normalize stage), or pick the runtime with the least per-op overhead.",
        expected_gain=f"batch {b}: ~{sp:.1f}x more samples/s (estimate)", speedup=round(sp, 3),
        ops_affected=totals.nodes,
    )
