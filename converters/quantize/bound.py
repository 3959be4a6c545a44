"""What every accuracy-aware INT8 search shares (ONNX Runtime, OpenVINO, TFLite), and the search over modes.

:func:`prepare` is the common start: the eval data checked, split into the part the search sees and the part
held back, and the FP32 reference run. :func:`choose_mode` is the first level of ``--precision int8`` with
``--quant-mode auto`` and a bound: each mode that fits the graph is built once, scored on the search part
(confirmed on the held-back part when within the bound), the ones within the bound are timed on the backend
against FP32 in blocks, and the fastest is kept. Every other candidate is reported with why it was dropped
(over the bound, slower, or failed to build), with its figures. When no mode holds the bound as it is, the
caller goes on with its options and per-op float search (:mod:`.strategy`) on the static mode.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from edgeopt.errors import EdgeoptError, GateFailedError, UsageError
from edgeopt.metrics.confidence import DEFAULT_CONFIDENCE
from edgeopt.runtime.quick_timing import blocked_latency_ms
from edgeopt.runtime.run_fn import run_fn

from .budget import BudgetedSearch

Build = Callable[[], tuple[Any, Callable, Any]]  # () -> (artifact, run function, QuantizedModel)


@dataclass
class Bounded:
    search: Any  # the part of --eval the search sees
    confirm: Any  # the part held back, which only confirms a hit
    fp32_run: Callable
    threads: int
    metric: Any = None  # the bound's MetricSpec (--metric; None: chosen from the output and the data)
    search_path: tuple[str, ...] = ()  # where a MODULE:FUNCTION metric is imported from
    whole: Any = None  # the eval data as given (both parts): the metric's kind is chosen on it, as the gate does
    confidence: float = DEFAULT_CONFIDENCE  # --confidence: of the drop's upper limit (edgeopt.metrics.confidence)
    looks: Any = None  # the run's looks at the held-back part (edgeopt.metrics.confidence.Looks), every search's


def prepare(ctx, prefix: str, onnx_path, bound) -> Bounded:
    """The eval data checked and split by ``bound`` (the stage's :class:`AccuracyBound`), the FP32 ONNX model's run
    (the reference of every metric) and the bound's task metric."""
    if ctx.eval is None or len(ctx.eval) < 4:
        raise UsageError(f"{prefix}: --max-accuracy-drop needs evaluation data (--eval FILE.npz, ≥ 4 samples)",
                         "give an .npz with the model's inputs (and 'labels' if you have them)")
    threads = ctx.threads or 2
    search, confirm = ctx.eval.split(bound.search_fraction, seed=0)
    # the user's unpruned FP32 model is the reference of every search (a pruning stage's loss is not forgiven)
    return Bounded(search, confirm, run_fn(ctx.reference_for(onnx_path), threads), threads, bound.metric,
                   tuple(ctx.metric_search_path), ctx.eval, bound.confidence, ctx.held_back_looks)


def warn_small_eval(ctx, report: dict, prefix: str) -> None:
    """Say on stderr (and in the manifest's warnings) when the held-back part can confirm only a candidate that loses
    no sample (``report['eval_too_small']``, set by the search: :func:`edgeopt.validation_model.small_eval_warning`);
    every backend's search calls it, so every profile says it."""
    msg = f"{prefix}: {report['eval_too_small']}" if report.get("eval_too_small") else None
    if msg and msg not in ctx.warnings:  # the mode search and the search after it say it once
        ctx.warn(msg)


@dataclass
class ModeCandidate:
    label: str  # "dynamic per-channel"
    build: Build


@dataclass
class ModeChoice:
    label: str | None  # the chosen candidate (None: none held the bound)
    artifact: Any = None
    quantized: Any = None  # its QuantizedModel
    report: dict = field(default_factory=dict)
    latency: dict = field(default_factory=dict)  # p50 ms per candidate timed, and "fp32"
    floats: dict | None = None  # the native float precisions judged and timed beside them (speed_verdict's alternatives)


def choose_mode(candidates: list[ModeCandidate], *, b: Bounded, bound: float, budget_s: float, fp32_timed: Callable,
                backend: str, progress=None, feed: dict | None = None,
                floats: dict[str, tuple[Callable, str]] | None = None) -> ModeChoice:
    """The fastest candidate within ``bound`` on both parts, timed on the backend against ``fp32_timed``.
    ``floats``: native float precisions of the FP32 model (``{"bf16": (run, what to type)}``), judged by the same
    rules and timed in the same blocks, never chosen here (``--precision int8`` keeps 8 bits): the speed verdict
    names one that holds and is faster (``ModeChoice.floats``)."""
    s = BudgetedSearch(fp32_run=b.fp32_run, search=b.search, confirm=b.confirm, bound=bound, budget_s=budget_s,
                       progress=progress, what=f"INT8 mode search ({backend})", metric_spec=b.metric,
                       search_path=b.search_path, whole=b.whole, confidence=b.confidence, looks=b.looks)
    built: dict[str, tuple[Any, Callable, Any]] = {}
    judged_modes: dict[str, Any] = {}  # mode label -> its Candidate (selected on the search part or not)
    rows: list[dict] = []
    try:
        for cand in candidates:
            row = {"mode": cand.label, "backend": backend}
            rows.append(row)

            def build(cand=cand):
                built[cand.label] = cand.build()
                return built[cand.label][:2]

            try:
                c = s.evaluate(cand.label, build)
            except (GateFailedError, UsageError):
                raise
            except EdgeoptError as err:  # a quantizer failing on this mode drops the mode, not the search
                row.update(verdict="dropped", why=f"failed to build: {err.message}")
                continue
            q = built[cand.label][2]
            judged_modes[cand.label] = c
            row.update(quantized_units=q.quantized_units, float_units=q.float_units,
                       search_value=round(c.search_value, 4), search_drop_points=round(s.drop(c.search_value), 3),
                       search_drop_upper=c.search_upper)
            if c.met is False or q.quantized_units > 0:  # one that quantizes nothing neither held nor missed
                row["within_bound"] = c.met
            if q.notes.get("per_tensor_retry"):
                row["per_tensor_retry"] = q.notes["per_tensor_retry"]
            if not c.met:
                row.update(verdict="dropped", why=f"over the bound: {s.why_missed(c)}")
            elif q.quantized_units == 0:
                row.update(verdict="dropped", why="quantizes nothing (every op with weights stayed float)")
        judged = {name: (s.judge(run, counted=False), run, suggest) for name, (run, suggest) in (floats or {}).items()}
    finally:
        s.close()
    within = [r["mode"] for r in rows if "verdict" not in r]
    report = {"metric": s.report["metric"], "metric_unit": s.report["metric_unit"], "bound_points": bound,
              "fp32": s.report["fp32"], "backend": backend, "candidates": rows,
              "search_samples": len(b.search), "confirm_samples": len(b.confirm), "acceptance": s.report["acceptance"],
              "confidence": b.confidence,
              **({"eval_too_small": s.report["eval_too_small"]} if "eval_too_small" in s.report else {})}
    if not within:
        return ModeChoice(None, report=report)
    runs = {"fp32": fp32_timed, **{label: built[label][1] for label in within},
            **{name: run for name, (_, run, _) in judged.items()}}
    latency = blocked_latency_ms(runs, feed if feed is not None else b.search.feed(0))
    alternatives = {name: _float_row(s, c, latency.pop(name), suggest) for name, (c, _, suggest) in judged.items()}
    if alternatives:
        report["floats"] = alternatives
    drops = {r["mode"]: r.get("search_drop_points") for r in rows}
    best, tied = _best_of(within, latency, drops)
    for r in rows:
        if r["mode"] in latency:
            r.update(latency_ms=latency[r["mode"]], speedup_vs_fp32=round(latency["fp32"] / latency[r["mode"]], 3))
        if r["mode"] == best:
            r.update(verdict="chosen", why="the fastest within the bound" if len(tied) == 1 else
                     f"the smallest drop of those within {TIE:.0%} of the fastest within the bound")
        elif r["mode"] in tied:
            r.update(verdict="dropped", why=f"as fast within {TIE:.0%} ({latency[r['mode']]:.3g} ms vs "
                                            f"{latency[best]:.3g} ms) but a larger drop ({drops[r['mode']]:.3g} vs "
                                            f"{drops[best]:.3g} points on the search part; {best})")
        elif r["mode"] in within:
            r.update(verdict="dropped", why=f"slower: {latency[r['mode']]:.3g} ms vs {latency[best]:.3g} ms "
                                            f"({best})")
    if not _confirmed(s, judged_modes[best], next(r for r in rows if r["mode"] == best), report):
        return ModeChoice(None, report=report)
    report.update(chosen=best, timing=f"p50 ms, each in its own block of calls, {b.threads} threads, vs FP32 "
                                      f"{latency['fp32']:.3g} ms on the same backend (a quick estimate)")
    artifact, _, quantized = built[best]
    return ModeChoice(best, artifact, quantized, report, latency, alternatives or None)


def _confirmed(s: BudgetedSearch, c, row: dict, report: dict) -> bool:
    """The chosen mode confirmed once on the held-back part (:func:`.verdict.confirmed`), its row updated (and the
    ``report``'s ``not_confirmed`` when it is not)."""
    from .verdict import confirmed

    ok = confirmed(s, c)
    row.update(confirm_value=round(c.confirm_value, 4), confirm_drop_points=round(s.drop(c.confirm_value, True), 3),
               all_drop_points=round(s.m_all.fp32_value - c.all_value, 3),
               **({} if c.confirm_upper is None else {"confirm_drop_upper": c.confirm_upper,
                                                      "all_drop_upper": c.all_upper}),
               **({} if c.halves_p90 is None else {"halves_drop_p90": c.halves_p90}))
    if not ok:
        row.update(within_bound=False, verdict="dropped",
                   why=f"chosen on the search part, not confirmed on the held-back part: {s.why_missed(c)}")
        report["not_confirmed"] = s.report.get("not_confirmed")
    return ok


TIE = 0.05  # candidates this close in speed are a tie: the quick timing can't order them (below)


def _best_of(within: list[str], latency: dict, drops: dict) -> tuple[str, list[str]]:
    """The candidate to keep of those ``within`` the bound: of those within ``TIE`` of the fastest's p50, the one
    with the smallest drop on the search part (then the faster). Two compiled models of one configuration
    time up to 5 % apart in one run (g2p-en's GRU, static INT8 with bf16 activations: 0.175 and 0.185 ms), so a
    closer lead is noise, and the smaller drop is the surer gain. Returns it and the tied candidates."""
    fastest = min(latency[label] for label in within)
    tied = [label for label in within if latency[label] <= fastest * (1 + TIE)]
    return min(tied, key=lambda label: (drops.get(label) or 0.0, latency[label])), tied


def _float_row(s: BudgetedSearch, c, ms: float, suggest: str) -> dict:
    """A native float precision judged by the search's rules (``c``) and timed beside the modes: the speed verdict's
    ``alternatives`` entry."""
    drop = (f"drop {s.m_all.fp32_value - c.all_value:.2f} points on all {s.m_all.samples} eval samples"
            if c.all_value is not None else f"drop {s.drop(c.search_value):.2f} points on the search part")
    return {"latency_ms": ms, "holds": bool(c.met), "drop": drop, "suggest": suggest}
