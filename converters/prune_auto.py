"""``--prune auto``: the largest channel-pruning ratio whose recovered student stays within the accuracy bound.

The calibration data is split once (seeded): a *search* share that neither pruning nor recovery ever sees, and
the rest, on which each candidate is pruned (bias compensation) and recovered (distillation, with the recover
stage's own held-back share for early stopping). Each candidate is judged on the search share with the task
metric (:mod:`edgeopt.metrics`: top-1 against labels when the data has them, else agreement with FP32, ...),
its drop being FP32's value there minus the student's. Ratios come from a fixed grid searched by bisection
(three probes for seven ratios), which assumes accuracy falls as the ratio grows; the recover budget
(``--recover-budget``) covers the whole search, shared between the probes still to run. The chosen student is
handed on already recovered (the recover stage passes it through); the chain's validation on ``--eval`` is the
final check on data the search never saw either.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from edgeopt.converters.base import ChainContext, Intermediate, StageRecord

SEARCH_SEED = 1234  # the split of the calibration data: fixed, so a plan always gives the same artifact
MIN_HELD = 8  # fewest samples the search judges on
MIN_TRAIN = 8  # fewest samples recovery trains on
RECOVERED_BY = "prune auto search"


def bisect_order(n: int, try_fn, left_s) -> tuple[int, list[int], bool]:
    """Bisection over indices 0..n-1 of an ascending grid: ``try_fn(i)`` says whether index i is within the
    bound. Returns (largest index found within, -1 for none; the indices tried in order; whether the search
    finished). Stops early when ``left_s()`` is not positive (the best found so far stands)."""
    lo, hi, tried = -1, n, []
    while hi - lo > 1:
        if tried and left_s() <= 0:
            return lo, tried, False
        mid = (lo + hi) // 2
        tried.append(mid)
        if try_fn(mid):
            lo = mid
        else:
            hi = mid
    return lo, tried, True


def effective_grid(ratios, kept_at) -> tuple[tuple[float, ...], dict[str, str]]:
    """The ratios that prune something different from every smaller one (``kept_at(ratio)`` -> channels kept per
    group), and why each other ratio is left out: it removes no channel, or keeps the same channels as a smaller
    ratio (channel rounding to the device's multiple makes neighbouring ratios one model)."""
    full = kept_at(0.0)
    grid: list[float] = []
    seen: dict[tuple, float] = {}
    left_out: dict[str, str] = {}
    for r in sorted(ratios):
        sig = kept_at(r)
        if sig == full:
            left_out[f"{r:g}"] = "removes no channel (channel counts rounded to the device's multiple)"
        elif sig in seen:
            left_out[f"{r:g}"] = f"keeps the same channels as {seen[sig]:g}"
        else:
            seen[sig] = r
            grid.append(r)
    return tuple(grid), left_out


def check_calib(calib) -> None:
    """The search needs real calibration data (part trains each candidate, part judges it): none is a usage
    error (exit 2), too few samples bad data (exit 3). Called before any work, and by the search itself."""
    from edgeopt.errors import BadDataError, UsageError

    need = MIN_HELD + MIN_TRAIN
    if calib is None or getattr(calib, "synthetic", False):
        raise UsageError(f"--prune auto needs real calibration data (at least {need} samples): "
                         "part of it trains each candidate, part judges it", "give --calib (no labels needed)")
    if len(calib) < need:
        raise BadDataError(f"--prune auto needs at least {need} calibration samples (part trains each candidate, "
                           f"part judges it); --calib '{calib.source}' has {len(calib)}",
                           "give more --calib samples (no labels needed), or a fixed --prune RATIO")


def search_ratio(model: Intermediate, config, ctx: ChainContext, *, prune_at, save, timing,
                 kept_at=None) -> Intermediate:
    """Run the search (see the module doc) and return the chosen student (or ``model`` unchanged when no ratio
    stays within the bound); the report goes to ``ctx.record``. The prune stage hands in what it does:
    ``prune_at(ratio, feeds)`` -> (pruned ModelProto, report), ``save(proto, path)``, ``timing(before, after)``
    -> the pruned-vs-unpruned latency entry; ``kept_at(ratio)`` -> channels kept per group, to try each distinct
    pruning once (:func:`effective_grid`)."""
    from edgeopt.converters.checks import ort_run_fn
    from edgeopt.metrics import make_metric

    rec = ctx.record
    assert rec is not None
    calib = ctx.calib
    check_calib(calib)
    if config.auto_recover:  # torch's import is not the search's time (as in the recover stage's own budget)
        from edgeopt.converters.recover import require_train

        require_train()
    t0 = time.perf_counter()
    deadline = t0 + config.auto_budget_s
    held_n = max(MIN_HELD, int(round(len(calib) * config.auto_holdout)))
    idx = np.random.default_rng(SEARCH_SEED).permutation(len(calib))
    held, train = calib.subset(np.sort(idx[:held_n])), calib.subset(np.sort(idx[held_n:]))
    metric = make_metric(ort_run_fn(ctx.reference_model, ctx.threads), held, role="calib")
    grid, left_out = effective_grid(config.auto_ratios, kept_at) if kept_at is not None else \
        (tuple(sorted(config.auto_ratios)), {})
    work = Path(ctx.work_dir) / "prune-auto"
    work.mkdir(parents=True, exist_ok=True)
    tried: dict[int, dict] = {}
    paths: dict[int, Path] = {}
    reports: dict[int, dict] = {}
    interrupted: list[float] = []
    recover = _recover_stage() if config.auto_recover else None

    def attempt(i: int) -> bool:
        ratio = grid[i]
        step_t0 = time.perf_counter()
        pruned, report = prune_at(ratio, train.feeds(config.calib_samples))
        row = {"ratio": ratio, "flops_reduction": round(report["flops_reduction"], 4)}
        if not report["changed"]:
            row.update({"within": False, "note": "nothing pruned at this ratio"})
            tried[i] = row
            return False
        out = work / f"ratio-{ratio:g}.pruned.onnx"
        save(pruned, out)
        result = Intermediate(out, model.format, model.precision, dict(model.notes))
        if recover is not None:
            probes_left = max(1, _probes_left(len(grid), tried, i))
            share = max(1.0, (deadline - time.perf_counter()) / probes_left)
            result, rrow = _recover(recover, result, ctx, train, work / f"ratio-{ratio:g}", share, config.seed)
            row.update(rrow)
        value = metric.score_outputs([ort_run_fn(result.path, ctx.threads)(f) for f in held.feeds()])
        drop = metric.drop(value)
        row.update({"held_metric": round(value, 4), "drop": round(drop, 4),
                    "within": bool(drop <= config.auto_max_drop), "seconds": round(time.perf_counter() - step_t0, 2)})
        tried[i] = row
        paths[i], reports[i] = result.path, report
        if row.get("stopped") == "interrupted":
            interrupted.append(ratio)
        return row["within"]

    def left_s() -> float:
        return -1.0 if interrupted else deadline - time.perf_counter()

    best, order, complete = bisect_order(len(grid), attempt, left_s)
    report = {
        "mode": "channels", "auto": True, "max_accuracy_drop": config.auto_max_drop, "grid": list(grid),
        "grid_left_out": left_out,
        "metric": metric.name, "metric_unit": metric.unit, "metric_basis": "labels" if metric.labels_used else "fp32",
        "held_metric_fp32": round(metric.fp32_value, 4), "search_held_samples": held_n, "train_samples": len(train),
        "tried": [tried[i] for i in order if i in tried], "recovered": recover is not None,
        "search_seconds": round(time.perf_counter() - t0, 2),
        "how": "bisection over the grid (assumes the metric falls as the ratio grows); each candidate pruned and "
               "recovered on the calibration data less a held-back share, judged on that share, which neither saw",
    }
    if interrupted:
        report["stopped"] = "interrupted"
        ctx.warn("prune auto: interrupted (Ctrl-C); the best ratio found so far was kept")
    elif not complete:
        report["stopped"] = "budget"
        ctx.warn(f"prune auto: the budget ({config.auto_budget_s:g} s, --recover-budget) ended the search after "
                 f"{len(order)} ratios; a larger budget may find a larger ratio")
    if best < 0:
        report.update({"ratio": 0.0, "changed": False})
        rec.report.update(report)
        tried_text = ", ".join(f"{t['ratio']:g}" for t in report["tried"])
        if not grid:
            ctx.warn(f"prune auto: no ratio of {', '.join(f'{r:g}' for r in sorted(config.auto_ratios))} removes a "
                     f"channel of this model at round_to {config.round_to}: the model is not pruned (a recipe's "
                     "stages: {prune: {round_to: N}} sets a finer multiple)")
        else:
            ctx.warn(f"prune auto: no ratio tried ({tried_text}) stayed within {config.auto_max_drop:g} points of "
                     f"{metric.name} of FP32 on the held-back data: the model is not pruned")
        return Intermediate(model.path, model.format, model.precision,
                            {**model.notes, "prune": {"mode": "channels", "ratio": 0.0, "auto": True}})
    chosen = tried[best]
    report.update({k: v for k, v in reports[best].items() if k not in ("ratio", "mode")})
    report.update({"ratio": grid[best], "changed": True, "chosen": chosen})
    rec.report.update(report)
    final = paths[best]
    rec.report["latency"] = timing(model.path, final)
    notes = {**model.notes, "prune": {"mode": "channels", "ratio": grid[best], "auto": True}}
    if recover is not None:
        notes["recover"] = {"by": RECOVERED_BY, "held_metric": chosen.get("held_metric")}
    return Intermediate(final, model.format, model.precision, notes)


def _probes_left(n: int, tried: dict, current: int) -> int:
    """Probes still to run, this one included (bisection over n takes about log2(n+1))."""
    return int(np.ceil(np.log2(n + 1))) - len(tried)


def _recover_stage():
    from edgeopt.converters.recover import Recover

    return Recover()


def _recover(stage, model: Intermediate, ctx: ChainContext, train, work: Path, budget_s: float, seed: int):
    from edgeopt.converters.recover import RecoverConfig

    work.mkdir(parents=True, exist_ok=True)
    config = RecoverConfig(budget_s=budget_s, required=True, seed=seed)
    sub = dataclasses.replace(ctx, work_dir=work, calib=train, eval=None, warnings=[],
                              record=StageRecord("recover", config.model_dump(mode="json")))
    out = stage.run(model, config, sub)
    r = sub.record.report
    row = {"recovery_seconds": r.get("recovery_seconds"), "epochs": r.get("epochs"), "stopped": r.get("stopped"),
           "held_metric_pruned_unrecovered": r.get("held_metric_pruned")}
    for w in sub.warnings:
        if "interrupted" in w:
            ctx.warn(w)
    return out, row
