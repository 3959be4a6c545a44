"""ONNX Runtime's modes under a bound: dynamic per-channel, dynamic per-tensor and static QDQ, each built once
with :class:`.onnxruntime_quantizer.OnnxRuntimeQuantizer`, the fastest within the bound kept
(:func:`.bound.choose_mode`); when none holds as built, dynamic again with its most sensitive ops kept in float
(:mod:`.ort_dynamic_float`). Used by the quantize stage for graphs where dynamic INT8 fits (MatMul/LSTM-heavy),
and for a pinned ``--quant-mode dynamic``."""

from __future__ import annotations

import shutil
from pathlib import Path

from edgeopt.enums import QuantMode
from edgeopt.errors import GateFailedError

from .bound import ModeCandidate, choose_mode, prepare, warn_small_eval
from .modes import DynamicMode, Granularity, StaticMode
from .onnxruntime_quantizer import OnnxRuntimeQuantizer
from .search import speed_verdict

RUNTIME = "onnxruntime (CPUExecutionProvider)"


def ort_candidates(src: Path, work: Path, threads: int, *, dynamic: tuple[Granularity, ...],
                   static=None) -> list[ModeCandidate]:
    """``static``: (preprocessed source, StaticSettings, input names, calib, calib_samples), or None."""
    from .bound import ort_runner

    quantizer = OnnxRuntimeQuantizer()

    def build(mode, path: Path, source: Path, **kw):
        def go():
            q = quantizer.quantize(source, mode, path, **kw)
            return path, ort_runner(path, threads), q
        return go

    out = [ModeCandidate(DynamicMode(granularity=g).label(), build(DynamicMode(granularity=g), work / f"dynamic-{g.value}.onnx", src))
           for g in dynamic]
    if static is not None:
        source, settings, names, calib, samples = static
        mode = StaticMode(granularity=Granularity.PER_CHANNEL if settings.per_channel else Granularity.PER_TENSOR)
        out.append(ModeCandidate(mode.label(), build(mode, work / "static.onnx", source, calib=calib,
                                                      settings=settings, input_names=names, calib_samples=samples)))
    return out


def search_ort_modes(model_path: Path, out: Path, work: Path, config, ctx, report: dict, *, pinned: bool,
                     static=None) -> bool:
    """Choose among the modes into ``out``; True when one held the bound (``report['mode_search']`` says what
    was tried and why each other was dropped). Pinned (``--quant-mode dynamic``): only dynamic, at the
    requested granularity, and missing the bound is exit 5."""
    from .bound import ort_runner

    b = prepare(ctx, "quantize", model_path, config.bound)
    if pinned:
        grains = (Granularity.PER_TENSOR if config.per_channel is False else Granularity.PER_CHANNEL,)
    else:
        grains = (Granularity.PER_CHANNEL, Granularity.PER_TENSOR)
    choice = choose_mode(ort_candidates(Path(model_path), work, b.threads, dynamic=grains, static=static), b=b,
                         bound=float(config.bound.max_accuracy_drop), budget_s=config.bound.search_budget,
                         fp32_timed=ort_runner(model_path, b.threads), backend="onnxruntime", progress=ctx.progress,
                         feed=(ctx.check_samples or b.search).feed(0))
    report["mode_search"] = choice.report
    warn_small_eval(ctx, choice.report, "quantize")
    for row in choice.report["candidates"]:
        if row.get("per_tensor_retry"):
            _warn_retry(ctx, row["mode"], row["per_tensor_retry"])
    if choice.label is None and _dynamic_with_float(Path(model_path), out, work, config, ctx, report, b, grains):
        return True
    if choice.label is None:
        if pinned:
            best = max((r for r in choice.report["candidates"] if "search_value" in r),
                       key=lambda r: r["search_value"], default=None)
            raise GateFailedError(f"quantize: dynamic INT8 misses --max-accuracy-drop {config.bound.max_accuracy_drop:g}"
                                  + (f": {best['why']}" if best else ""),
                                  "use --quant-mode auto (static INT8 with its search), relax the bound, or "
                                  "--precision fp32", details=choice.report)
        return False
    shutil.copyfile(choice.artifact, out)
    report.update(mode=choice.quantized.mode.kind.value, method=f"{choice.label} INT8 (onnxruntime.quantization), "
                  "the fastest mode within the bound")
    report["speed"] = speed_verdict(choice.latency, final_key=choice.label, runtime=RUNTIME,
                                    min_speedup=config.bound.min_speedup, ctx=ctx, prefix="quantize", threads=b.threads)
    return True


def _dynamic_with_float(model_path: Path, out: Path, work: Path, config, ctx, report: dict, b, grains) -> bool:
    """Dynamic INT8 with its most sensitive ops in float (:mod:`.ort_dynamic_float`), kept when it holds the bound,
    as a mode that holds as built is (its speed against FP32, timed in blocks, is reported and warned about like
    theirs; ``--min-speedup`` gates it): True when written to ``out``. Its search is under
    ``report['mode_search']['float_fallback']``."""
    from .bound import ort_runner
    from .ort_dynamic_float import search_dynamic_with_float
    from .search import blocked_latency_ms

    result = search_dynamic_with_float(model_path, work, b, bound=float(config.bound.max_accuracy_drop),
                                       budget_s=config.bound.search_budget, grains=grains, progress=ctx.progress)
    entry = report["mode_search"]["float_fallback"] = result.report
    if result.best is None:
        entry["verdict"] = "no dynamic candidate with ops in float held the bound"
        return False
    best = result.best
    latency = blocked_latency_ms({"fp32": ort_runner(model_path, b.threads), best.label: ort_runner(best.artifact, b.threads)},
                                 (ctx.check_samples or b.search).feed(0))
    entry.update(latency_ms=latency, speedup_vs_fp32=round(latency["fp32"] / latency[best.label], 3),
                 kept_in_float=list(best.kept), verdict="chosen: holds the bound")
    report["mode_search"]["chosen"] = best.label
    shutil.copyfile(best.artifact, out)
    report.update(mode=QuantMode.DYNAMIC.value,
                  method=f"{best.label} INT8 (onnxruntime.quantization): no mode held the bound as built, "
                         f"{len(best.kept)} op(s) kept in float ({', '.join(best.kept[:4])})")
    report["speed"] = speed_verdict(latency, final_key=best.label, runtime=RUNTIME, min_speedup=config.bound.min_speedup,
                                    ctx=ctx, prefix="quantize", threads=b.threads)
    return True


def _warn_retry(ctx, what: str, retried: list[dict]) -> None:
    nodes = [r.get("node") or r.get("weight") or "?" for r in retried]
    how = retried[-1]["retried"]
    ctx.warn(f"quantize: ONNX Runtime's quantizer crashed with per-channel weights ({retried[0]['error'][:120]}); "
             f"{what} retried with {how} for {', '.join(nodes[:4])}" + (" …" if len(nodes) > 4 else ""))


def warn_retry(ctx, notes: dict, what: str) -> None:
    if notes.get("per_tensor_retry"):
        _warn_retry(ctx, what, notes["per_tensor_retry"])

