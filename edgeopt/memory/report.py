"""Memory in ``analyze``: the prediction for the profile's first backend at its default precision against its
budget, a line of text, and the chart of live bytes per op against the budget line."""

from __future__ import annotations

from pathlib import Path

from edgeopt.memory.fit import MemoryFit
from edgeopt.memory.gate import budget_of
from edgeopt.memory.predict import MemoryPrediction, predict_memory, size_text


def analyze_memory(model, profile, input_shapes=None, options=None) -> tuple[MemoryFit, MemoryPrediction]:
    """(the fit without the per-op series, the full prediction) for ``profile``'s first backend."""
    target = profile.preferred_backend
    micro = "micro" in target.settings
    pred = predict_memory(model, target.name.value, profile.default_chain.precision, input_shapes=input_shapes,
                          microcontroller=micro)
    budget, source = budget_of(profile, options)
    lean = pred.model_copy(update={"live_bytes": [], "node_names": []})
    return MemoryFit(predicted=lean, budget_bytes=budget, budget_source=source,
                     fits=pred.total_bytes <= budget), pred


def memory_line(fit: MemoryFit) -> str:
    p = fit.predicted
    verdict = "fits" if fit.fits else "does NOT fit"
    flash = f"; flash {size_text(p.flash_bytes)} of weights" if p.weights_in_flash and p.flash_bytes else ""
    return (f"memory (estimate, {p.backend} {p.precision}): {p.figures()}{flash}; budget {size_text(fit.budget_bytes)} "
            f"({fit.budget_source}): {verdict}")


def memory_lines(fit: MemoryFit) -> list[str]:
    """``inspect``'s memory lines: the prediction against the budget, then what was measured, if anything."""
    m = fit.measured or {}
    if "peak_bytes" in m:
        err = f", the estimate {m['error_pct']:+g} %" if "error_pct" in m else ""
        return [memory_line(fit), f"memory measured: peak {size_text(m['peak_bytes'])} (load "
                f"{size_text(m['load_bytes'])}, first inference {size_text(m['first_inference_bytes'])}) on "
                f"{m.get('where', 'this host')}{err}"]
    if "arena_bytes" in m:
        flash = f", flash {size_text(m['flash_bytes'])}" if m.get("flash_bytes") else ""
        return [memory_line(fit), f"memory measured (TFLite Micro): arena {size_text(m['arena_bytes'])}{flash}"]
    return [memory_line(fit)] + ([f"memory measured: not measured ({m['error']})"] if "error" in m else [])


def plot_memory(pred: MemoryPrediction, budget: int, path: Path) -> Path:
    """Live activation bytes per op (plus weights and runtime, which live throughout) against the budget."""
    from edgeopt.deps import require

    require("matplotlib", "analyze --plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = pred.runtime_bytes + (0 if pred.weights_in_flash else pred.weights_bytes)
    fig, ax = plt.subplots(figsize=(10, 4))
    xs = list(range(len(pred.live_bytes)))
    ax.bar(xs, [base / 1e6] * len(xs), color="#bbbbbb", label="runtime + weights")
    ax.bar(xs, [b / 1e6 for b in pred.live_bytes], bottom=[base / 1e6] * len(xs), color="#3b75af",
           label="live activations")
    ax.axhline(budget / 1e6, color="#c0392b", linestyle="--", label=f"budget {size_text(budget)}")
    ax.set_xlabel("op (ONNX node order)")
    ax.set_ylabel("MB (estimate)")
    ax.set_title(f"Predicted memory per op: {pred.backend} {pred.precision}, arena {size_text(pred.arena_bytes)}")
    ax.legend(loc="upper right")
    fig.tight_layout()
    from edgeopt.files import atomic_path

    with atomic_path(Path(path)) as tmp:
        fig.savefig(tmp, format=Path(path).suffix.lstrip(".").lower())
    plt.close(fig)
    return Path(path)


def micro_lines(report: dict) -> list[str]:
    """The TFLite Micro report of a build as text: TFLM's run, the arena found, the C array, the firmware's flash."""
    acc, arena, fw = report.get("accuracy") or {}, report.get("arena") or {}, report.get("firmware") or {}
    alloc = arena.get("allocations") or {}
    lines = [f"TFLite Micro: {len(report.get('ops', []))} op kinds, all in TFLM's op set; run in TFLM's interpreter on "
             f"{acc.get('samples')} samples: drop {acc.get('drop')} points vs FP32 (bound {acc.get('bound')})",
             f"arena: {arena.get('arena_bytes')} bytes, the smallest that runs (bisection to "
             f"{arena.get('resolution_bytes')} bytes, {arena.get('tries')} tries); TFLM's allocator: "
             f"plan {alloc.get('head_bytes')} + persistent {alloc.get('tail_bytes')} bytes"]
    if "skipped" in fw:
        lines.append(f"firmware: not compiled: {fw['skipped']}")
    elif fw:
        avail = fw.get("flash_available_bytes")
        of = f" of {avail} ({100 * fw['flash_bytes'] / avail:.1f} %)" if avail else ""
        lines.append(f"firmware ({' '.join(fw['flags'])}): flash {fw['flash_bytes']} bytes{of}: text "
                     f"{fw['text_bytes']} + data {fw['data_bytes']} (model {fw['model_bytes']}); bss {fw['bss_bytes']}")
    return lines
