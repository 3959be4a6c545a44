"""What each candidate prefix of the model costs in the artifact that will be written: the cost that places the
early-exit cuts and the stage times the exits are chosen with.

The cost profile of a model differs between runtimes and precisions (in LiteRT INT8 the early, high-resolution
layers take a larger share than in ONNX Runtime FP32), so a prefix is timed as the profile's backend runs it, at
the run's precision, here, on one thread: its hooks' ``prefix_timer`` converts (and quantizes) the prefix as it
would and returns a run function. Where the backend can't be timed here (no timer, or its libraries missing), the
prefix's cost is the FLOP/byte roofline estimate (:mod:`edgeopt.analyze`) on the profile's unit for that backend,
labelled estimated. ``early_exit.cuts_by=reference`` times the prefixes in the reference runtime instead, on the
model as the chain hands it on.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from edgeopt.enums import CutCost, Precision

TIMER_CALIB = 16  # --calib samples a self-quantizing backend calibrates each timed prefix on
REFERENCE = "reference runtime (ONNX, CPU, 1 thread, this host; the model as the chain hands it on)"


class PrefixCost(NamedTuple):
    measure: Callable[[list[Path]], list[float]]  # ONNX files -> ms of one run of each, timed together
    what: str  # what timed (or estimated) it
    estimated: bool  # a cost model's estimate, not a timing
    limit: int  # the most prefixes to cost


def prefix_cost(config, ctx, feed: dict, work: Path) -> PrefixCost:
    """How the prefixes are costed for this run (see the module's docstring)."""
    from edgeopt.converters.early_exit import cuts as C

    runs = config.timing_runs
    if config.cuts_by == CutCost.BY_REFERENCE or config.backend is None:
        return PrefixCost(lambda ps: C.time_models(ps, feed, runs), REFERENCE, False, C.MAX_TIMED_CANDIDATES)
    from edgeopt.converters.registry import hooks_of

    hooks = hooks_of(config.backend)
    calib = ctx.calib.subset(list(range(min(TIMER_CALIB, len(ctx.calib)))))
    made = hooks.prefix_timer(config.int8, calib, work / "prefix_timer")
    limit = min(C.MAX_TIMED_CANDIDATES, hooks.prefix_timer_limit)
    if made is not None:
        open_run, what = made
        opened: dict = {}  # a prefix timed again (beside its exit head) is not converted again

        def open_once(path):
            if path not in opened:
                opened[path] = open_run(path)
            return opened[path]

        return PrefixCost(lambda ps: C.time_models(ps, feed, runs, open_once), what, False, limit)
    return estimated_cost(config, "can't be timed here")


def estimated_cost(config, why: str) -> PrefixCost:
    """The roofline estimate on the profile's unit for the plan's backend, at the run's precision; ``why``: why the
    backend does not time the prefixes itself."""
    from edgeopt.converters.early_exit import cuts as C

    precision = Precision.INT8 if config.int8 else Precision.FP32
    profile, unit = _unit(config.profile, config.backend)
    what = f"estimated: FLOP/byte roofline on {profile.name}'s {unit.value} at {precision.value} ({config.backend} {why})"
    return PrefixCost(lambda ps: [estimate_ms(p, profile, unit, precision) for p in ps], what, True,
                      C.MAX_TIMED_CANDIDATES)


def _unit(profile_name: str | None, backend):
    from edgeopt.profiles import load_profile

    profile = load_profile(profile_name or "host")
    target = next((b for b in profile.backends if b.name == backend), None)
    return profile, (target.unit if target is not None else profile.preferred_backend.unit)


def estimate_ms(path: Path, profile, unit, precision: Precision) -> float:
    """The roofline estimate of one run of the ONNX file ``path`` on ``profile``'s ``unit`` at ``precision``
    (FP32 where the unit has no figure for it), with the per-op dispatch cost."""
    from edgeopt.analyze import analyze_model

    result = analyze_model(path, profile, preflight=False)
    pred = result.prediction(unit, precision) or result.prediction(unit, Precision.FP32)
    return float(pred.estimate_ms) if pred is not None else 0.0
