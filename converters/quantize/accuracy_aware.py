"""Accuracy-aware INT8 for ONNX Runtime: meet ``--max-accuracy-drop`` by the quantizer's options
first, then by keeping the most sensitive nodes in float (ranked once, grown then bisected, within
``--search-budget``: :mod:`.strategy`), then say whether the result is faster than FP32.

The search only ever sees one part of the eval data; the bound is then confirmed on the other
part, and both figures are reported (tuning on the same samples that judge the result is how
peer tools overfit). The metric comes from ``edgeopt.metrics`` where it exists (fitted to the output);
:class:`Metric` here is the top-1 fallback: without labels top-1 agreement with FP32 (in %), and for a
one-value output (a probability) agreement of the decision at 0.5; the report says which.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from edgeopt.converters.base import CalibMethod
from edgeopt.quant_units import units_of
from edgeopt.runtime.quick_timing import QUICK_S, interleaved_latency_ms
from edgeopt.runtime.reference import REFERENCE_RUNTIME
from edgeopt.runtime.run_fn import run_fn

from . import sensitivity
from .bound import warn_small_eval
from .fallback import FloatPrefix
from .heads import HeadsOption, multi_output_heads
from .presets import TENSORRT
from .qdq_static import WEIGHTED_OPS, StaticSettings, equalized_path, quantize_static
from .speed_verdict import speed_verdict
from .strategy import run_search, with_heads_option
from .verdict import gate_failure

MATMUL_OPS = ("MatMul", "Gemm")


MIN_NECK_MATMULS = 4  # MatMul/Gemm nodes that make a matmul neck (or head stack), not one classifier layer


def _variants(base: StaticSettings, tensorrt: bool = False, op_counts: dict[str, int] | None = None,
              heads: tuple[str, ...] = ()) -> list[tuple[str, StaticSettings]]:
    """The quantizer's options, in the order tried. Placement comes before calibration: quantizing the arithmetic
    between the weighted ops is what breaks most models that INT8 breaks (unrolled LayerNorm statistics, whose
    E[x^2]-E[x]^2 cancels; the cube inside a tanh-GELU, whose range is 10^5 times its median), and Q/DQ at the
    weighted ops' inputs only is TensorRT's own placement advice. Each placement is then tried with the other
    calibration method. Biases kept float is offered only where the preset quantizes them. Last, on a graph with both
    convolutions and a matmul neck (``op_counts``: nodes per op type; ``MIN_NECK_MATMULS`` matmuls or more, so a
    CNN's one Gemm head is no such option: it would hold the bound with the head alone INT8), Q/DQ at the matmuls only: the PP-OCRv4 recogniser's conv backbone is
    what loses (greedy CTC readings of 100 lines vs FP32, TensorRT-shaped Q/DQ: 54 with the convs alone INT8, 99 with
    the 13 matmuls alone, 49 with both). For TensorRT
    (``tensorrt``) the preset and the two weighted-only placements only: the graph-order float fallback starts from
    the latter and needs the budget that another calibration of every op costs (DBNet's percentile one: 11-15 s of
    60 on a loaded machine, 1 point above the preset, and the fallback then had no time for one candidate). A model
    with several outputs (``heads``: :func:`.heads.multi_output_heads`) gets, right after the preset, its output heads in
    float with its depthwise pairs equalized (:mod:`.equalize`) and moving-average calibration: BlazeFace's score
    output, a constant logit 0 with the preset, needed all three (map IoU of its decisions vs FP32 on 40 images:
    preset 47 %, heads in float 51 %, and equalized 70 %, and moving-average calibration 91 %)."""
    flip = CalibMethod.PERCENTILE if base.calib_method == CalibMethod.MINMAX else CalibMethod.MINMAX
    weighted = base.model_copy(update={"op_types_to_quantize": WEIGHTED_OPS})
    out = [
        ("preset", base),
        (f"{WEIGHTED_LABEL} (Add/Mul/activations/normalisation in float)", weighted),
        (f"{WEIGHTED_LABEL}, calibration {flip.value}", weighted.model_copy(update={"calib_method": flip})),
        (f"calibration {flip.value}", base.model_copy(update={"calib_method": flip})),
        ("moving-average calibration", base.model_copy(update={"moving_average": True})),
    ]
    if base.quantize_bias:
        out.append(("biases kept float (QuantizeBias=False)", base.model_copy(update={"quantize_bias": False})))
    counts = op_counts or {}
    matmuls, convs = sum(counts.get(t, 0) for t in MATMUL_OPS), counts.get("Conv", 0) + counts.get("ConvTranspose", 0)
    if matmuls >= MIN_NECK_MATMULS and convs:  # a conv backbone under a matmul neck, not a CNN's one Gemm head
        out.append((f"{WEIGHTED_LABEL}: MatMul/Gemm, convolutions in float",
                    base.model_copy(update={"op_types_to_quantize": MATMUL_OPS})))
    if tensorrt:  # per-tensor scales and percentile calibration are tried before any op goes to float
        out.insert(3, (f"{WEIGHTED_LABEL}, per-tensor weights, calibration {CalibMethod.PERCENTILE.value}",
                       weighted.model_copy(update={"per_channel": False, "calib_method": CalibMethod.PERCENTILE})))
        out = [(label, v) for label, v in out if label == "preset" or label.startswith(WEIGHTED_LABEL)]
    return with_heads_option(out, HeadsOption(heads, equalized=True, moving_average=True) if heads else None,
                             lambda h: base.model_copy(update={"nodes_to_exclude": h.heads, "equalize": True,
                                                               "moving_average": True}))


HEADS_LABEL = HeadsOption((), equalized=True, moving_average=True).label()


WEIGHTED_LABEL = "weighted ops only"


def weighted_options(variants: list[tuple[str, StaticSettings]]) -> tuple[int, ...]:
    """The indices in ``variants`` (:func:`_variants`) of the options with Q/DQ at the weighted ops only, by label."""
    return tuple(i for i, (label, _) in enumerate(variants) if label.startswith(WEIGHTED_LABEL))


def weighted_in_graph_order(qdq_path) -> list[str]:
    """The named Conv/ConvTranspose/MatMul/Gemm nodes of a QDQ model that read a DequantizeLinear output, in graph
    order: what the graph-order float fallback keeps in float, a prefix at a time."""
    import onnx

    qdq = onnx.load(str(qdq_path), load_external_data=False)
    ops = {n.name: n.op_type for n in qdq.graph.node}
    return [n for n in sensitivity.quantized_nodes(qdq) if n and ops.get(n) in WEIGHTED_OPS]


def tensorrt_prefix(preset: str | None, variants: list[tuple[str, StaticSettings]]) -> FloatPrefix | None:
    """The graph-order float fallback on the better weighted-ops-only option, for the ``tensorrt`` preset: TensorRT fuses
    Q/DQ into the weighted ops only, so the rest of the graph runs as TensorRT chooses whatever its Q/DQ say, and the
    early layers are where INT8 loses on detectors (DBNet: 98.4 % map IoU vs FP32 held back with its first 32 of 64
    convs float, while the ranking by sensitivity spent its budget on Add/Clip nodes)."""
    if preset != TENSORRT:
        return None
    return FloatPrefix(bases=weighted_options(variants), ops=weighted_in_graph_order)


def skip_all_ops_option(bound: float, base: str = "preset"):
    """``skip_when`` of the options that quantize every op (another calibration, biases): pointless once Q/DQ at the
    weighted ops only scored more than the bound above the preset (the placement, not the calibration, is what
    loses), and each costs a calibration (a percentile one of magika's one-hot input: half the search's share).
    ``base``: the label of the option quantizing every op that the placement is compared with (OpenVINO's search
    names it after NNCF's)."""
    def skip_when(scored: dict) -> str | None:
        preset = scored.get(base)
        weighted = [c for label, c in scored.items() if label.startswith(WEIGHTED_LABEL)]
        if preset is None or not weighted:
            return None
        best = max(weighted, key=lambda c: c.search_value)
        if best.search_value - preset.search_value > bound:
            above = "the preset" if base == "preset" else f"'{base}'"
            return (f"'{best.label}' scored {best.search_value - preset.search_value:.1f} points above {above}: "
                    "quantizing every op is what loses, not its calibration")
        return None
    return skip_when


def accuracy_aware(src: Path, work: Path, base: StaticSettings, ctx, accuracy_bound, input_names: list[str],
                   calib_samples: int | None, fp16_hint: bool = False, preset: str | None = None) -> tuple[Path, dict]:
    """Quantize ``src`` (FP32 ONNX) so the metric drop stays within ``accuracy_bound`` (the stage's
    :class:`AccuracyBound`) on data the search never saw, within its search budget (:mod:`.strategy`); returns
    (path, report). ``preset``: the hardware preset's name (``tensorrt`` adds the graph-order float fallback)."""
    import onnx

    from .bound import prepare

    b = prepare(ctx, "qdq", src, accuracy_bound)
    bound, min_speedup = float(accuracy_bound.max_accuracy_drop), accuracy_bound.min_speedup
    threads, search, confirm, fp32_run = b.threads, b.search, b.confirm, b.fp32_run
    graph = onnx.load(str(src), load_external_data=False)
    variants = _variants(base, tensorrt=preset == TENSORRT, op_counts=Counter(n.op_type for n in graph.graph.node),
                         heads=multi_output_heads(graph))
    paths: dict[int, Path] = {}
    fp32_of: dict[str, Path] = {}  # each candidate's FP32 counterpart (its equalized copy where it was equalized)

    retry: dict = {}

    def build(i: int, settings: StaticSettings, name: str):
        def go():
            paths[i] = quantize_static(src, work / name, settings, ctx.calib, input_names, calib_samples, notes=retry,
                                       calib_cache=work / "calibration")
            fp32_of[str(paths[i])] = equalized_path(src, work, ctx.calib) if settings.equalize else src
            return paths[i], run_fn(paths[i], threads)
        if 0 < i < 100 and not settings.op_types_to_quantize:  # an option quantizing every op, past the preset
            go.skip_when = skip_all_ops_option(bound)
        return go

    method = [sensitivity.ISOLATED_METHOD]

    def rank(qdq_path: Path, deadline: float) -> list[tuple[str, float]]:
        qdq, fp32_path = onnx.load(str(qdq_path)), fp32_of.get(str(qdq_path), src)
        if len(sensitivity.quantized_nodes(qdq)) > sensitivity.LOCAL_LIMIT:
            try:
                ranked = sensitivity.rank_nodes_local(qdq_path, fp32_path, search, 8, work)
                method[0] = sensitivity.LOCAL_METHOD
                return ranked
            except Exception as err:  # noqa: BLE001 - a QDQ layout the debug tool can't read: rank one by one
                method[0] = f"{sensitivity.ISOLATED_METHOD} (the one-run ranking failed: {type(err).__name__}: {err})"[:300]
        return sensitivity.rank_nodes(qdq, onnx.load(str(fp32_path)), search.feeds(min(32, len(search))),
                                      lambda m: run_fn(m, threads), deadline=deadline)

    def with_float(i: int, kept: tuple[str, ...]):
        settings = variants[i][1]
        step = settings.model_copy(update={"nodes_to_exclude": tuple(settings.nodes_to_exclude) + kept})
        return build(100 + len(kept), step, f"variant{i}-exclude{len(kept)}.onnx")

    result = run_search(
        options=[(label, build(i, settings, f"variant{i}.onnx")) for i, (label, settings) in enumerate(variants)],
        rank=rank, with_float=with_float, fp32_run=fp32_run, search=search, confirm=confirm, bound=bound,
        budget_s=accuracy_bound.search_budget, progress=ctx.progress, what="INT8 search (onnxruntime)",
        metric_spec=b.metric, search_path=b.search_path,
        sensitivity_method=sensitivity.ISOLATED_METHOD, quantizes=lambda path: units_of(Path(path))[0] > 0,
        fallback_bases=len(variants), whole=b.whole, float_prefix=tensorrt_prefix(preset, variants),
        confidence=b.confidence, looks=b.looks)
    report = result.report
    warn_small_eval(ctx, report, "qdq")
    if retry:
        from .qdq_modes import warn_retry

        report["per_tensor_retry"] = retry["per_tensor_retry"]
        warn_retry(ctx, retry, "static INT8")
    if "sensitivity" in report:
        report["sensitivity"]["method"] = method[0]
    chosen_i = next(i for i, (label, _) in enumerate(variants) if label == report["quantizer_options"]["chosen"])
    report["quantizer_options"]["settings"] = variants[chosen_i][1].model_dump(mode="json")
    if result.best is None:
        ctx.stage_report().update(accuracy_aware=report)
        raise gate_failure("qdq", result, bound)
    path = Path(result.best.artifact)
    qdq = onnx.load(str(paths[chosen_i]), load_external_data=False) if result.best.kept else None
    errors = dict(result.ranked)
    report["kept_in_float"] = [{"node": n, "op": _op(qdq, n), "error": round(errors.get(n, 0.0), 6)}
                               for n in result.best.kept]
    _speed_check(report, ctx, fp32_run, paths[0], path, threads, (ctx.check_samples or search).feed(0),
                 min_speedup, fp16_hint)
    return path, report


def _speed_check(report: dict, ctx, fp32_run, naive_path: Path, path: Path, threads, feed, min_speedup,
                 fp16_hint: bool) -> None:
    """The chosen INT8 (and the naive one) timed against FP32, interleaved; the verdict in ``report``."""
    runs = {"fp32": fp32_run, "int8_naive": run_fn(naive_path, threads)}
    if path != naive_path:
        runs["int8_final"] = run_fn(path, threads)
    latency = interleaved_latency_ms(runs, feed, target_s=QUICK_S)
    report["latency_ms"] = latency | {"runs_each_at_least": 20, "threads": threads,
                                      "note": "quick ORT p50 on bench's clock, not a benchmark"}
    ctx.stage_report().update(accuracy_aware=report)  # a speed-gate failure below still reports the search
    report["speed"] = speed_verdict(latency, final_key="int8_final" if "int8_final" in runs else "int8_naive",
                                    runtime=REFERENCE_RUNTIME, min_speedup=min_speedup, ctx=ctx,
                                    prefix="qdq", alternatives=_fp16_hint(fp16_hint), threads=threads)


def _fp16_hint(profile_has_gpu: bool) -> dict | None:
    """FP16 is the faster precision to name only where the profile has a GPU (ONNX Runtime's CPU
    provider runs FP16 through casts); its accuracy is not measured here (no GPU to run it)."""
    if profile_has_gpu:
        return {"fp16": {"latency_ms": None, "drop": "not measured here: the profile's GPU runs it",
                         "suggest": "--precision fp16"}}
    return None


def _op(model, name: str) -> str:
    return next((n.op_type for n in model.graph.node if n.name == name), "?")
