"""Accuracy-aware INT8: meet ``--max-accuracy-drop`` by the quantizer's options first, then by
keeping the most sensitive nodes in float.

The search only ever sees one part of the eval data; the bound is then confirmed on the other
part, and both figures are reported (tuning on the same samples that judge the result is how
peer tools overfit). Without labels the metric is top-1 agreement with FP32 (in %), and for a
one-value output (a probability) agreement of the decision at 0.5; the report says which.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from edgeopt.converters.base import CalibMethod
from edgeopt.errors import GateFailedError, UsageError

from . import sensitivity
from .ort_static import WEIGHTED_OPS, StaticSettings, quantize_static


def ort_runner(model, threads: int | None = 2):
    """A run function for an ONNX path or ModelProto (first output's name order kept)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    if threads:
        so.intra_op_num_threads = threads
    src = model.SerializeToString() if hasattr(model, "SerializeToString") else str(model)
    sess = ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    inputs = {i.name for i in sess.get_inputs()}

    def run(feed):
        return dict(zip(names, sess.run(names, {k: np.asarray(v) for k, v in feed.items() if k in inputs}), strict=True))

    run.session = sess
    return run


class Metric:
    """Top-1 accuracy with labels, else agreement with FP32; in percent."""

    def __init__(self, fp32_run, dataset):
        self.labels = None if dataset.labels is None else np.asarray(dataset.labels).ravel()
        self.fp32_preds = self._preds(fp32_run, dataset)
        self.kind = "top1_accuracy" if self.labels is not None else "top1_agreement_with_fp32"
        if self.fp32_binary:
            self.kind += " (one-value output: decision at 0.5)"
        self.fp32_value = self.score_preds(self.fp32_preds)

    def _preds(self, run, dataset) -> np.ndarray:
        out = []
        for feed in dataset.feeds():
            y = np.asarray(next(iter(run(feed).values())))
            flat = y.reshape(y.shape[0] if y.ndim > 1 else 1, -1)
            self.fp32_binary = flat.shape[-1] == 1
            out.append((flat[0, 0] > 0.5) if self.fp32_binary else int(np.argmax(flat[0])))
        return np.asarray(out)

    def score_preds(self, preds: np.ndarray) -> float:
        target = self.labels if self.labels is not None else self.fp32_preds
        return float(100.0 * np.mean(preds.astype(np.int64) == target.astype(np.int64))) if len(preds) else 0.0

    def score(self, run, dataset) -> float:
        return self.score_preds(self._preds(run, dataset))


def _latency_ms(runs: dict, feed, repeats: int = 20) -> dict:
    """Quick interleaved ORT latency (p50 of ``repeats``), for the cost of keeping nodes in float."""
    times: dict[str, list[float]] = {k: [] for k in runs}
    for r in runs.values():
        r(feed)
    for _ in range(repeats):
        for k, r in runs.items():
            t0 = time.perf_counter()
            r(feed)
            times[k].append((time.perf_counter() - t0) * 1e3)
    return {k: round(float(np.median(v)), 3) for k, v in times.items()} | {"runs_each": repeats, "threads": 2,
                                                                          "note": "quick interleaved ORT p50, not a benchmark"}


def _variants(base: StaticSettings) -> list[tuple[str, StaticSettings]]:
    flip = CalibMethod.PERCENTILE if base.calib_method == CalibMethod.MINMAX else CalibMethod.MINMAX
    return [
        ("preset", base),
        (f"calibration {flip.value}", base.model_copy(update={"calib_method": flip})),
        ("moving-average calibration", base.model_copy(update={"moving_average": True})),
        ("weighted ops only (Add/Mul/activations/normalisation in float)",
         base.model_copy(update={"op_types_to_quantize": WEIGHTED_OPS})),
        ("biases kept float (QuantizeBias=False)", base.model_copy(update={"quantize_bias": False})),
    ]


def _schedule(n: int) -> list[int]:
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k = k + 1 if k < 4 else int(k * 1.5)
    return ks + [n]


def accuracy_aware(src: Path, work: Path, base: StaticSettings, ctx, bound: float, input_names: list[str],
                   calib_samples: int | None, search_fraction: float = 0.5) -> tuple[Path, dict]:
    """Quantize ``src`` (FP32 ONNX) so the metric drop stays ≤ ``bound`` points; returns (path, report)."""
    import onnx

    if ctx.eval is None or len(ctx.eval) < 4:
        raise UsageError("quantize: --max-accuracy-drop needs evaluation data (--eval FILE.npz, ≥ 4 samples)",
                         "give an .npz with the model's inputs (and 'labels' if you have them)")
    search, confirm = ctx.eval.split(search_fraction, seed=0)
    fp32_run = ort_runner(src, ctx.threads or 2)
    m_search, m_confirm = Metric(fp32_run, search), Metric(fp32_run, confirm)
    report: dict = {
        "metric": m_search.kind,
        "labels": ctx.eval.labels is not None,
        "bound_points": bound,
        "search_samples": len(search),
        "confirm_samples": len(confirm),
        "fp32": {"search": m_search.fp32_value, "confirm": m_confirm.fp32_value},
        "tried": [],
    }

    def evaluate(path_or_proto, label: str) -> float:
        drop = m_search.fp32_value - m_search.score(ort_runner(path_or_proto, ctx.threads or 2), search)
        report["tried"].append({"what": label, "search_drop_points": round(drop, 3)})
        return drop

    best = None  # (drop, label, settings, path)
    for i, (label, settings) in enumerate(_variants(base)):
        path = quantize_static(src, work / f"variant{i}.onnx", settings, ctx.calib, input_names, calib_samples)
        drop = evaluate(path, label)
        if best is None or drop < best[0] - 1e-9:
            best = (drop, label, settings, path)
        if drop <= bound:
            break
    naive_path = work / "variant0.onnx"
    drop, label, settings, path = best
    report["quantizer_options"] = {"chosen": label, "settings": settings.model_dump(mode="json")}
    excluded: list[dict] = []
    confirm_drop = None
    if drop <= bound:
        confirm_drop = m_confirm.fp32_value - m_confirm.score(ort_runner(path, ctx.threads or 2), confirm)
    if drop > bound or confirm_drop > bound:
        fp32_model = onnx.load(str(src))
        qdq = onnx.load(str(path))
        feeds = search.feeds(min(32, len(search)))
        ranked = sensitivity.rank_nodes(qdq, fp32_model, feeds, lambda m: ort_runner(m, ctx.threads or 2))
        report["sensitivity"] = {"method": "output error (1 - cosine) with only that node quantized, on the search part",
                                 "nodes": len(ranked),
                                 "top": [{"node": n, "error": round(e, 6)} for n, e in ranked[:10]]}
        met = False
        for k in _schedule(len(ranked)):
            keep = tuple(n for n, _ in ranked[:k])
            step = settings.model_copy(update={"nodes_to_exclude": tuple(settings.nodes_to_exclude) + keep})
            candidate = quantize_static(src, work / f"exclude{k}.onnx", step, ctx.calib, input_names, calib_samples)
            drop = evaluate(candidate, f"{label} + {k} most sensitive node(s) in float")
            if drop > bound:
                continue
            confirm_drop = m_confirm.fp32_value - m_confirm.score(ort_runner(candidate, ctx.threads or 2), confirm)
            if confirm_drop <= bound:
                met, path = True, candidate
                excluded = [{"node": n, "op": _op(qdq, n), "error": round(e, 6)} for n, e in ranked[:k]]
                break
            report["tried"][-1]["confirm_drop_points"] = round(confirm_drop, 3)
        if not met:
            report.update(met=False, search_drop_points=round(drop, 3))
            ctx.stage_report().update(accuracy_aware=report)
            raise GateFailedError(
                f"quantize: INT8 misses --max-accuracy-drop {bound} on {m_search.kind} even with every node in float",
                "keep FP32 (--precision fp32) for this model", details=report)
    report.update(
        met=True,
        search_drop_points=round(drop, 3),
        confirm_drop_points=round(confirm_drop, 3),
        kept_in_float=excluded,
        kept_in_float_count=len(excluded),
    )
    feed = (ctx.check_samples or search).feed(0)
    runs = {"fp32": fp32_run, "int8_naive": ort_runner(naive_path, ctx.threads or 2)}
    if path != naive_path:
        runs["int8_final"] = ort_runner(path, ctx.threads or 2)
    report["latency_ms"] = _latency_ms(runs, feed)
    return path, report


def _op(model, name: str) -> str:
    return next((n.op_type for n in model.graph.node if n.name == name), "?")
