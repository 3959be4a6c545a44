"""The shared Q/DQ stage's modes under a bound: the modes :class:`.qdq_quantizer.QdqQuantizer` declares
(dynamic per-channel, dynamic per-tensor, static QDQ), each built once, the fastest within the bound kept
(:func:`.bound.choose_mode`); when none holds as built, dynamic again with its most sensitive ops kept in float
(:mod:`.qdq_dynamic_float`). Used by the qdq stage for graphs where dynamic INT8 fits (MatMul/LSTM-heavy),
and for ``--quant-mode dynamic``."""

from __future__ import annotations

import shutil
from pathlib import Path

from edgeopt.enums import QuantMode
from edgeopt.errors import GateFailedError
from edgeopt.runtime.reference import REFERENCE, REFERENCE_RUNTIME

from .bound import ModeCandidate, choose_mode, prepare, warn_small_eval
from .modes import MODE_TYPES, Granularity
from .qdq_quantizer import QdqQuantizer
from .speed_verdict import speed_verdict

QUANTIZER = QdqQuantizer  # the searches' modes come from its ``modes`` declaration


def _grain(per_channel: bool) -> Granularity:
    return Granularity.PER_CHANNEL if per_channel else Granularity.PER_TENSOR


def qdq_search_modes(quant_mode: QuantMode, per_channel: bool | None, static_settings=None) -> list:
    """The quantizer's modes this search builds (:meth:`.modes.Quantizer.search_modes`): static only with its
    setup, at the granularity its settings (the profile's preset) name; a kind asked for with ``--quant-mode``
    at the ``--per-channel`` granularity asked for (default per-channel)."""
    out = []
    for mode in QUANTIZER.search_modes(quant_mode):
        if mode.kind == QuantMode.STATIC:
            if static_settings is None or mode.granularity != _grain(static_settings.per_channel):
                continue
        elif quant_mode != QuantMode.AUTO and mode.granularity != _grain(per_channel is not False):
            continue
        out.append(mode)
    return out


def qdq_candidates(src: Path, work: Path, threads: int, modes: list, static=None) -> list[ModeCandidate]:
    """One candidate per mode; ``static``: (preprocessed source, StaticSettings, input names, calib,
    calib_samples), which a static mode is built with."""
    from edgeopt.runtime.run_fn import run_fn

    quantizer = QUANTIZER()

    def build(mode, path: Path, source: Path, **kw):
        def go():
            q = quantizer.quantize(source, mode, path, **kw)
            return path, run_fn(path, threads), q
        return go

    out = []
    for mode in modes:
        path = work / f"{mode.label().replace(' ', '-')}.onnx"
        if mode.kind == QuantMode.STATIC:
            source, settings, names, calib, samples = static
            out.append(ModeCandidate(mode.label(), build(mode, path, source, calib=calib, settings=settings,
                                                          input_names=names, calib_samples=samples)))
        else:
            out.append(ModeCandidate(mode.label(), build(mode, path, src)))
    return out


def search_qdq_modes(model_path: Path, out: Path, work: Path, config, ctx, report: dict, *, static=None) -> bool:
    """Choose among the modes into ``out``; True when one held the bound (``report['mode_search']`` says what
    was tried and why each other was dropped). ``config.mode``: the ``--quant-mode`` asked for; a named one
    (``dynamic``) is only that kind, at the requested granularity, and missing the bound is exit 5."""
    from edgeopt.runtime.run_fn import run_fn

    b = prepare(ctx, "qdq", model_path, config.bound)
    modes = qdq_search_modes(config.mode, config.per_channel, None if static is None else static[1])
    grains = tuple(m.granularity for m in modes if m.kind == QuantMode.DYNAMIC)
    choice = choose_mode(qdq_candidates(Path(model_path), work, b.threads, modes, static), b=b,
                         bound=float(config.bound.max_accuracy_drop), budget_s=config.bound.search_budget,
                         fp32_timed=run_fn(model_path, b.threads), backend=REFERENCE, progress=ctx.progress,
                         feed=(ctx.check_samples or b.search).feed(0))
    report["mode_search"] = choice.report
    warn_small_eval(ctx, choice.report, "qdq")
    for row in choice.report["candidates"]:
        if row.get("per_tensor_retry"):
            _warn_retry(ctx, row["mode"], row["per_tensor_retry"])
    rival = None if choice.label is None else (choice.label, choice.artifact)
    if grains and (choice.label is None or _static_held_where_dynamic_missed(choice)) and \
            _dynamic_with_float(Path(model_path), out, work, config, ctx, report, b, grains, rival):
        return True
    if choice.label is None:
        if config.mode != QuantMode.AUTO:
            best = max((r for r in choice.report["candidates"] if "search_value" in r),
                       key=lambda r: r["search_value"], default=None)
            raise GateFailedError(f"qdq: {MODE_TYPES[config.mode].what} INT8 misses --max-accuracy-drop {config.bound.max_accuracy_drop:g}"
                                  + (f": {best['why']}" if best else ""),
                                  "use --quant-mode auto (static INT8 with its search), relax the bound, or "
                                  "--precision fp32", details=choice.report)
        return False
    shutil.copyfile(choice.artifact, out)
    report.update(mode=choice.quantized.mode.kind.value, method=f"{choice.label} INT8 (onnxruntime.quantization), "
                  "the fastest mode within the bound")
    report["speed"] = speed_verdict(choice.latency, final_key=choice.label, runtime=REFERENCE_RUNTIME,
                                    min_speedup=config.bound.min_speedup, ctx=ctx, prefix="qdq", threads=b.threads)
    return True


def _static_held_where_dynamic_missed(choice) -> bool:
    """Static INT8 was chosen and every dynamic mode missed the bound: on a recurrent graph static leaves the LSTMs
    float (ONNX Runtime has no static LSTM), so dynamic with one op in float can be the faster one that holds
    (resemblyzer's encoder: static x1.03 ORT FP32, dynamic with its first LSTM float x1.9)."""
    dynamic = [r for r in choice.report["candidates"] if r["mode"].startswith("dynamic")]
    return choice.label.startswith("static") and any(r.get("within_bound") is False for r in dynamic) \
        and not any(r.get("within_bound") for r in dynamic)


def _dynamic_with_float(model_path: Path, out: Path, work: Path, config, ctx, report: dict, b, grains,
                        rival: tuple[str, Path] | None = None) -> bool:
    """Dynamic INT8 with its most sensitive ops in float (:mod:`.qdq_dynamic_float`), kept when it holds the bound
    (and, with ``rival``, the mode that held as built, when it is the faster of the two, timed in the same blocks),
    as a mode that holds as built is (its speed against FP32, timed in blocks, is reported and warned about like
    theirs; ``--min-speedup`` gates it): True when written to ``out``. Its search is under
    ``report['mode_search']['float_fallback']``."""
    from edgeopt.runtime.quick_timing import blocked_latency_ms
    from edgeopt.runtime.run_fn import run_fn

    from .qdq_dynamic_float import search_dynamic_with_float

    result = search_dynamic_with_float(model_path, work, b, bound=float(config.bound.max_accuracy_drop),
                                       budget_s=config.bound.search_budget, grains=grains, progress=ctx.progress)
    entry = report["mode_search"]["float_fallback"] = result.report
    if result.best is None:
        entry["verdict"] = "no dynamic candidate with ops in float held the bound"
        return False
    best = result.best
    runs = {"fp32": run_fn(model_path, b.threads), best.label: run_fn(best.artifact, b.threads)}
    if rival is not None:
        runs[rival[0]] = run_fn(rival[1], b.threads)
    latency = blocked_latency_ms(runs, (ctx.check_samples or b.search).feed(0))
    entry.update(latency_ms=latency, speedup_vs_fp32=round(latency["fp32"] / latency[best.label], 3),
                 kept_in_float=list(best.kept))
    if rival is not None and latency[rival[0]] <= latency[best.label]:
        entry["verdict"] = (f"held the bound, slower than {rival[0]} ({latency[best.label]:.3g} ms vs "
                            f"{latency[rival[0]]:.3g} ms)")
        return False
    entry["verdict"] = "chosen: holds the bound" + (f", faster than {rival[0]} ({latency[rival[0]]:.3g} ms)"
                                                    if rival is not None else "")
    for row in report["mode_search"]["candidates"]:
        if rival is not None and row["mode"] == rival[0]:
            row.update(verdict="dropped", why=f"slower: {latency[rival[0]]:.3g} ms vs {best.label}'s "
                                              f"{latency[best.label]:.3g} ms (its float fallback)")
    report["mode_search"]["chosen"] = best.label
    shutil.copyfile(best.artifact, out)
    report.update(mode=QuantMode.DYNAMIC.value,
                  method=f"{best.label} INT8 (onnxruntime.quantization): "
                         + ("no mode held the bound as built" if rival is None else
                            f"no dynamic mode held the bound as built, and {rival[0]}, which did, is slower")
                         + f", {len(best.kept)} op(s) kept in float ({', '.join(best.kept[:4])})")
    report["speed"] = speed_verdict(latency, final_key=best.label, runtime=REFERENCE_RUNTIME, min_speedup=config.bound.min_speedup,
                                    ctx=ctx, prefix="qdq", threads=b.threads)
    return True


def _warn_retry(ctx, what: str, retried: list[dict]) -> None:
    nodes = [r.get("node") or r.get("weight") or "?" for r in retried]
    how = retried[-1]["retried"]
    ctx.warn(f"qdq: ONNX Runtime's quantizer crashed with per-channel weights ({retried[0]['error'][:120]}); "
             f"{what} retried with {how} for {', '.join(nodes[:4])}" + (" …" if len(nodes) > 4 else ""))


def warn_retry(ctx, notes: dict, what: str) -> None:
    if notes.get("per_tensor_retry"):
        _warn_retry(ctx, what, notes["per_tensor_retry"])

