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

import time
from pathlib import Path

import numpy as np

from edgeopt.converters.base import ChainContext, Intermediate

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
    rec = ctx.record
    assert rec is not None
    check_calib(ctx.calib)
    if config.auto_recover:  # torch's import is not the search's time (as in the recover stage's own budget)
        from edgeopt.converters.recover import require_train

        require_train()
    search = _RatioSearch(model, config, ctx, prune_at, save, kept_at)
    best, order, complete = bisect_order(len(search.grid), search.attempt, search.left_s)
    report = search.report(order)
    if search.interrupted:
        report["stopped"] = "interrupted"
        ctx.warn("prune auto: interrupted (Ctrl-C); the best ratio found so far was kept")
    elif not complete:
        report["stopped"] = "budget"
        ctx.warn(f"prune auto: the budget ({config.bound.search_budget:g} s, --search-budget) ended the search after "
                 f"{len(order)} ratios; a larger budget may find a larger ratio")
    if best < 0:
        return _none_within(model, config, ctx, search, report)
    chosen = search.tried[best]
    report.update({k: v for k, v in search.reports[best].items() if k not in ("ratio", "mode")})
    report.update({"ratio": search.grid[best], "changed": True, "chosen": chosen})
    rec.report.update(report)
    final = search.paths[best]
    rec.report["latency"] = timing(model.path, final)
    notes = {**model.notes, "prune": {"mode": "channels", "ratio": search.grid[best], "auto": True}}
    if search.recovers:
        notes["recover"] = {"by": RECOVERED_BY, "held_metric": chosen.get("held_metric")}
    return Intermediate(final, model.format, model.precision, notes)


class _RatioSearch:
    """The search's data (the calibration split, the metric judged on the held-back share, the grid) and what
    each probe found: ``attempt(i)`` prunes, recovers and judges the grid's i-th ratio."""

    def __init__(self, model: Intermediate, config, ctx: ChainContext, prune_at, save, kept_at):
        from edgeopt.metrics import make_metric
        from edgeopt.runtime.run_fn import run_fn

        self.model, self.config, self.ctx, self.prune_at, self.save = model, config, ctx, prune_at, save
        calib = ctx.calib
        self.t0 = time.perf_counter()
        self.deadline = self.t0 + config.bound.search_budget
        self.held_n = max(MIN_HELD, int(round(len(calib) * config.auto_holdout)))
        idx = np.random.default_rng(SEARCH_SEED).permutation(len(calib))
        self.held, self.train = calib.subset(np.sort(idx[:self.held_n])), calib.subset(np.sort(idx[self.held_n:]))
        self.metric = make_metric(run_fn(ctx.reference_model, ctx.threads), self.held, config.bound.metric,
                                  search_path=list(ctx.metric_search_path), role="calib")
        self.grid, self.left_out = effective_grid(config.auto_ratios, kept_at) if kept_at is not None else \
            (tuple(sorted(config.auto_ratios)), {})
        self.work = Path(ctx.work_dir) / "prune-auto"
        self.work.mkdir(parents=True, exist_ok=True)
        self.tried: dict[int, dict] = {}
        self.paths: dict[int, Path] = {}
        self.reports: dict[int, dict] = {}
        self.interrupted: list[float] = []
        self.recovers = config.auto_recover

    def attempt(self, i: int) -> bool:
        """Whether the grid's i-th ratio, pruned (and recovered), stays within the bound on the held-back data."""
        from edgeopt.runtime.run_fn import run_fn

        config, model, ratio = self.config, self.model, self.grid[i]
        step_t0 = time.perf_counter()
        pruned, report = self.prune_at(ratio, self.train.feeds(config.calib_samples))
        row = {"ratio": ratio, "flops_reduction": round(report["flops_reduction"], 4)}
        if not report["changed"]:
            row.update({"within": False, "note": "nothing pruned at this ratio"})
            self.tried[i] = row
            return False
        out = self.work / f"ratio-{ratio:g}.pruned.onnx"
        self.save(pruned, out)
        result = Intermediate(out, model.format, model.precision, dict(model.notes))
        if self.recovers:
            probes_left = max(1, _probes_left(len(self.grid), self.tried, i))
            share = max(1.0, (self.deadline - time.perf_counter()) / probes_left)
            result, rrow = _recover(result, self.ctx, self.train, self.work / f"ratio-{ratio:g}",
                                    candidate_recover_config(config, share))
            row.update(rrow)
        value = self.metric.score_outputs([run_fn(result.path, self.ctx.threads)(f) for f in self.held.feeds()])
        drop = self.metric.drop(value)
        row.update({"held_metric": round(value, 4), "drop": round(drop, 4),
                    "within": bool(drop <= config.bound.max_accuracy_drop), "seconds": round(time.perf_counter() - step_t0, 2)})
        self.tried[i] = row
        self.paths[i], self.reports[i] = result.path, report
        if row.get("stopped") == "interrupted":
            self.interrupted.append(ratio)
        return row["within"]

    def left_s(self) -> float:
        return -1.0 if self.interrupted else self.deadline - time.perf_counter()

    def report(self, order: list[int]) -> dict:
        metric = self.metric
        return {
            "mode": "channels", "auto": True, "max_accuracy_drop": self.config.bound.max_accuracy_drop, "grid": list(self.grid),
            "grid_left_out": self.left_out,
            "metric": metric.name, "metric_unit": metric.unit,
            "metric_basis": "labels" if metric.labels_used else "fp32",
            "held_metric_fp32": round(metric.fp32_value, 4), "search_held_samples": self.held_n,
            "train_samples": len(self.train),
            "tried": [self.tried[i] for i in order if i in self.tried], "recovered": self.recovers,
            "search_seconds": round(time.perf_counter() - self.t0, 2),
            "how": "bisection over the grid (assumes the metric falls as the ratio grows); each candidate pruned and "
                   "recovered on the calibration data less a held-back share, judged on that share, which neither saw",
        }


def _none_within(model: Intermediate, config, ctx: ChainContext, search: _RatioSearch, report: dict) -> Intermediate:
    """No ratio stayed within the bound (or none prunes anything): the model goes on unpruned, and the warning
    says which."""
    report.update({"ratio": 0.0, "changed": False})
    ctx.record.report.update(report)
    tried_text = ", ".join(f"{t['ratio']:g}" for t in report["tried"])
    if not search.grid:
        ctx.warn(f"prune auto: no ratio of {', '.join(f'{r:g}' for r in sorted(config.auto_ratios))} removes a "
                 f"channel of this model at round_to {config.round_to}: the model is not pruned (a recipe's "
                 "stages: {prune: {round_to: N}} sets a finer multiple)")
    else:
        ctx.warn(f"prune auto: no ratio tried ({tried_text}) stayed within {config.bound.max_accuracy_drop:g} points of "
                 f"{search.metric.name} of FP32 on the held-back data: the model is not pruned")
    return Intermediate(model.path, model.format, model.precision,
                        {**model.notes, "prune": {"mode": "channels", "ratio": 0.0, "auto": True}})


def _probes_left(n: int, tried: dict, current: int) -> int:
    """Probes still to run, this one included (bisection over n takes about log2(n+1))."""
    return int(np.ceil(np.log2(n + 1))) - len(tried)


def candidate_recover_config(config, budget_s: float):
    """The recover config a candidate is distilled with: the plan's (``auto_recover_config``, the recover stage's
    own, recipe overrides included) with the candidate's share of the budget; recovery is required of it."""
    from edgeopt.converters.recover import RecoverConfig

    # none planned (the stage run on its own): the recover defaults, judged with this search's bound (its --metric)
    planned = config.auto_recover_config or RecoverConfig(seed=config.seed, bound=config.bound)
    return planned.model_copy(update={"budget_s": budget_s, "required": True})


def _recover(model: Intermediate, ctx: ChainContext, train, work: Path, config):
    """One candidate distilled with its planned recover config (the recover stage's work as a plain function, not
    the stage run inside this one): (the student, or ``model`` when distillation did not improve it; its row)."""
    from edgeopt.converters.recover import INTERRUPTED, distil_student

    work.mkdir(parents=True, exist_ok=True)
    done = distil_student(model.path, ctx.reference_model, train, config, work, threads=ctx.threads,
                          progress=ctx.progress, search_path=ctx.metric_search_path)
    r = done.report
    row = {"recovery_seconds": r.get("recovery_seconds"), "epochs": r.get("epochs"), "stopped": r.get("stopped"),
           "held_metric_pruned_unrecovered": r.get("held_metric_pruned")}
    if done.stopped == "interrupted":
        ctx.warn(INTERRUPTED)
    out = Intermediate(done.path, model.format, model.precision, dict(model.notes)) if done.improved else model
    return out, row
