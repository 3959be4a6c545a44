"""Accuracy-aware INT8 for TFLite: the float ``.tflite`` quantized by ai-edge-quantizer, within ``--search-budget``.

The search of :mod:`edgeopt.converters.quantize.strategy` over :class:`.quantizer.TFLiteQuantizer`:

1. the quantizer's options: static INT8 with the configured weight granularity (for a model with several outputs,
   then the same with its output heads in float: :func:`heads_option`), then dynamic-range INT8
   (INT8 weights, activations quantized at run time: what recurrent, MatMul-heavy and normalisation-heavy
   graphs keep best), weight-only INT8 (activations float: the most accurate, rarely faster), then static
   with the other granularity. Static calibration runs once, before the search's clock starts (its seconds
   are reported apart), and every static candidate reuses its ranges (where it fails, e.g. on a recurrent
   layer's WHILE loop, only the other modes are tried);
2. then ops kept in float over the best option, by per-op recipe (``no_quantize`` for the op's scope): the
   quantized ops are ranked **once** by their own quantization noise (:func:`rank_ops`: the noise of an
   op's output relative to the float model's, minus the worst noise it already received on its inputs, on
   a few search samples), and the float set grows 1, 2, 4, … and is bisected over that ranking.

Every candidate is scored on the search part and confirmed on the held-back part. A miss is exit 5 naming
the best metric. The result is then timed against the float ``.tflite`` (same conversion), interleaved: a
quick estimate, labelled so.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from edgeopt.converters.quantize.heads import HeadsOption
from edgeopt.converters.quantize.modes import Granularity, QuantMode
from edgeopt.converters.quantize.sensitivity import UNRANKED
from edgeopt.converters.quantize.speed_verdict import speed_verdict
from edgeopt.converters.quantize.strategy import run_search, with_heads_option
from edgeopt.converters.quantize.verdict import gate_failure
from edgeopt.errors import StageError, UsageError
from edgeopt.runtime.quick_timing import QUICK_S, interleaved_latency_ms
from edgeopt.runtime.run_fn import run_fn

from .quantizer import read_ops

RANK_SAMPLES = 4  # enough to order ops by their own noise; each costs two all-tensor runs


def search_tflite(backend, quantizer, float_tflite: Path, model, config, ctx, *, runtime: dict,
                  granularity: Granularity):
    """Returns (the chosen ``QuantizedModel``, the search report)."""
    from edgeopt.converters.quantize.bound import warn_small_eval

    if ctx.eval is None or len(ctx.eval) < 4:
        raise UsageError("tflite: --max-accuracy-drop needs evaluation data (--eval FILE.npz, >= 4 samples)",
                         "give an .npz with the model's inputs (and 'labels' if you have them)")
    threads = ctx.threads or 2
    search, confirm = ctx.eval.split(config.bound.search_fraction, seed=0)
    modes = quantizer.mode_configs(config.mode, granularity)  # --quant-mode: that kind only
    t0 = time.perf_counter()
    static_failed = None
    try:
        quantizer.calibrate(float_tflite, ctx.calib)  # once, before the clock: every static candidate reuses it
    except StageError as err:  # e.g. a recurrent layer's WHILE loop: the other modes need no calibration
        static_failed = err.message
        modes = [m for m in modes if m.kind != QuantMode.STATIC]
        if not modes:  # --quant-mode static, which can't be made here
            raise
    calibration_s = time.perf_counter() - t0
    work = ctx.work_dir / "tflite_search"
    work.mkdir(exist_ok=True)
    count = iter(range(1 << 30))

    # each option: (label, (mode, ops it keeps in float)); a model with several outputs gets its heads in float
    bases = with_heads_option([(f"ai-edge-quantizer {m.label()}", (m, ())) for m in modes],
                              heads_option(float_tflite, modes[0]), lambda h: (modes[0], h.heads))

    def build(i: int, kept: tuple[str, ...] = ()):
        def go():
            mode, base_kept = bases[i][1]
            made = quantizer.quantize(float_tflite, mode, work / f"cand{next(count)}.tflite", calib=ctx.calib,
                                      keep_float=tuple(dict.fromkeys(base_kept + tuple(kept))))
            return made, run_fn(made.path, threads, runtime=runtime)
        return go

    def rank(made, deadline: float) -> list[tuple[str, float]]:
        feeds = quantizer.signature_feeds(float_tflite, search)[:RANK_SAMPLES]
        try:
            return rank_ops(float_tflite, made.path, feeds, deadline)
        except (ValueError, RuntimeError) as err:  # LiteRT could not keep every tensor: no ranking, say why
            ctx.warn(f"tflite: the INT8 ops could not be ranked ({type(err).__name__}: {err}); none kept in float")
            return []

    result = run_search(
        options=[(label, build(i)) for i, (label, _) in enumerate(bases)],
        rank=rank, with_float=lambda i, kept: build(i, kept), fp32_run=run_fn(ctx.reference_for(model.path), threads),  # unpruned FP32
        search=search, confirm=confirm, bound=config.bound.max_accuracy_drop, budget_s=config.bound.search_budget,
        metric_spec=config.bound.metric, search_path=tuple(ctx.metric_search_path),
        progress=ctx.progress, what="INT8 search (tflite/ai-edge-quantizer)",
        sensitivity_method="per-op output noise vs the float .tflite, minus the noise on its inputs", whole=ctx.eval,
        confidence=config.bound.confidence)
    report = result.report
    warn_small_eval(ctx, report, "tflite")
    report["calibration_seconds"] = round(calibration_s, 2)
    if static_failed:
        report["static_failed"] = static_failed
    if result.best is None:
        ctx.stage_report().update(accuracy_aware=report)
        err = gate_failure("tflite", result, config.bound.max_accuracy_drop)
        if not report.get("stopped_by_budget"):  # the budget was not what stopped it: don't send the user there
            err.hint = "relax --max-accuracy-drop, or keep FP32 (--precision fp32) or FP16 (--precision fp16)"
        for scope in result.closest.kept[:3]:  # an op's scope joins its fused tensors' names: name its first
            err.message = err.message.replace(scope, scope.split(";")[0])
        raise err
    made = result.best.artifact
    report["kept_in_float"] = list(made.kept_float)
    report["ops"] = {"quantized": made.notes["quantized_ops"], "float": made.notes["float_ops"]}
    report["speed"] = _speed(float_tflite, made.path, runtime, ctx, config, threads, search)
    return made, report


def heads_option(float_tflite: Path, first) -> HeadsOption | None:
    """The searches' heads option (:mod:`edgeopt.converters.quantize.heads`) on the float ``.tflite``, for a model
    with several outputs whose first option is static INT8 (the other modes leave activations float already).
    ai-edge-quantizer's calibration averages each tensor's range over the samples (its ``moving_average_update``)
    for every option, so the option adds the heads in float only; depthwise pairs are not equalized (that is a
    rewrite of the ONNX source, and this model is onnx2tf's conversion of it)."""
    from .heads import output_heads

    if first.kind != QuantMode.STATIC:
        return None
    heads = output_heads(float_tflite)
    return HeadsOption(heads) if heads else None


def rank_ops(float_path: Path, quant_path: Path, feeds: list[dict], deadline: float) -> list[tuple[str, float]]:
    """Quantized ops (by scope), most harmful first: each op's output noise (mean squared error over the
    float model's mean square, on ``feeds``) minus the largest noise among its inputs. Ops met after
    ``deadline`` are not dropped: they come last, scored ``UNRANKED`` (an empty ranking would end the search
    as if no op could be kept in float, and its message would not name the budget)."""
    model, ops = read_ops(quant_path)
    late = time.perf_counter() > deadline  # no time for the two all-tensor runs: every op unranked, none dropped
    ref = {} if late else _tensors(float_path, feeds)
    got = {} if late else _tensors(quant_path, feeds)
    tensors = model.subgraphs[0].tensors

    def noise(index: int) -> float:
        name = tensors[index].name
        name = name.decode() if isinstance(name, bytes) else str(name)
        if name not in ref or name not in got:
            return 0.0
        errs = [float(np.mean((g - r) ** 2) / (np.mean(r ** 2) + 1e-12))
                for r, g in zip(ref[name], got[name], strict=True) if r.shape == g.shape]
        return float(np.mean(errs)) if errs else 0.0

    # a weight-only op reads float weights that a DEQUANTIZE of an 8-bit constant makes: it is quantized too
    dequantized = {t for op in ops if op["qdq"] for t in op["outputs"]
                   if any(int(tensors[i].type) in (3, 7, 9) for i in op["inputs"])}
    scores, unranked = [], []
    for op in ops:
        if op["qdq"] or not op["scope"] or not (dequantized & set(op["inputs"]) or any(
                int(tensors[t].type) in (3, 7, 9) for t in op["inputs"] + op["outputs"])):
            continue
        if time.perf_counter() > deadline:  # no time to score it: ranked last, as the search expects (UNRANKED)
            unranked.append((op["scope"], UNRANKED))
            continue
        out = max((noise(t) for t in op["outputs"]), default=0.0)
        before = max((noise(t) for t in op["inputs"]), default=0.0)
        scores.append((op["scope"], out - before))
    scores.sort(key=lambda s: -s[1])
    return scores + unranked


def _tensors(path: Path, feeds: list[dict]) -> dict[str, list[np.ndarray]]:
    """Every tensor of the main subgraph after each feed, dequantized, by name (LiteRT without a delegate,
    all tensors preserved)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from edgeopt.runtime.runners.tflite import dequantize, quantize

    it = Interpreter(model_path=str(path), experimental_preserve_all_tensors=True,
                     experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    it.allocate_tensors()
    sig = it.get_signature_runner("serving_default")
    ins = dict(sig.get_input_details())
    out: dict[str, list[np.ndarray]] = {}
    details = it.get_tensor_details()
    for feed in feeds:
        sig(**{k: quantize(v, ins[k]) for k, v in feed.items()})
        for d in details:
            try:
                arr = it.get_tensor(d["index"])
            except ValueError:
                continue
            if arr.dtype.kind in "fiu" and arr.size:
                out.setdefault(d["name"], []).append(np.asarray(dequantize(arr, d), np.float64))
    return out


def _speed(float_tflite: Path, final: Path, runtime: dict, ctx, config, threads: int, search) -> dict:
    """The INT8 result against the float ``.tflite`` it was made from, interleaved."""
    runs = {"fp32": run_fn(float_tflite, threads, runtime=runtime),
            "int8_final": run_fn(final, threads, runtime=runtime)}
    latency = interleaved_latency_ms(runs, (ctx.check_samples or search).feed(0), target_s=QUICK_S)
    return speed_verdict(latency, final_key="int8_final", runtime="LiteRT (XNNPACK)", min_speedup=config.bound.min_speedup,
                         ctx=ctx, prefix="tflite", threads=threads)
