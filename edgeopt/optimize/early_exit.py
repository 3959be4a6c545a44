"""``optimize``'s ``early-exit`` step: ``--early-exit auto`` on the fastest INT8 candidate within the bound and on the fastest float one (the incumbent among them), so the waterfall shows what exits add with and
without INT8. Only for a classifier, and only with ``--calib`` (the heads are distilled on it) and ``--eval``
(the thresholds are chosen and confirmed on it). A cascade's latency depends on the input: where one is measured,
every candidate of that measurement runs the same samples of ``--eval`` in turn instead of repeating one."""

from __future__ import annotations

import itertools
from pathlib import Path

STEP = "early-exit"
MEASURE_SAMPLES = 64  # samples of --eval a measurement with a cascade in it cycles through


def _why_not(s) -> str | None:
    """Why the step does not apply to this search (None: it does)."""
    from edgeopt.converters.early_exit.classifier import classifier_output_of
    from edgeopt.errors import EdgeoptError
    from edgeopt.model import graph_outputs, load_onnx

    if not s.calib or not s.eval:
        return f"{STEP}: needs --calib (the exit heads are distilled on it) and --eval (thresholds chosen on it)"
    try:
        classifier_output_of(graph_outputs(load_onnx(s.model)), strict=False)
    except EdgeoptError as err:
        return f"{STEP}: {err.message}"
    return None


def _best(cands) -> object | None:
    timed = [c for c in cands if c is not None and c.feasible and c.p50_ms is not None and c.artifact]
    return min(timed, key=lambda c: c.p50_ms) if timed else None


def early_exit_step(s, inc, before_precision, trail: list):
    """Build and measure the early-exit candidates against the incumbent: exits on the fastest INT8 candidate within
    the bound and on the fastest float one (the incumbent among them); returns the new incumbent."""
    from edgeopt.optimize.candidates import target_fields, target_label

    why = _why_not(s)
    if why:
        s.skipped.append(why)
        return inc
    is_int8 = inc.target.get("precision") == "int8"
    int8 = [*s.tried.get("int8", []), *([inc] if is_int8 else [])]
    floats = [*s.tried.get("float", []), before_precision, *([] if is_int8 else [inc])]
    bases = [c for c in (_best(int8), _best(floats)) if c is not None]
    bases.sort(key=lambda c: c is not inc)  # the incumbent's own exits first
    options = [(target_label(f), f) for f in (target_fields(c, early_exit="auto") for c in bases)]
    after = s.step(STEP, inc, options)
    for c in s.tried.get(STEP, []):
        if c.artifact and not (Path(c.artifact) / "cascade.json").is_file():  # the same model as its base
            c.label += " (no exit kept)"
            c.feasible, c.repeats_base = False, True
            c.note = "no exit kept: the convert wrote the plain model (the stage report says why)"
    if after.note:
        after = inc
    trail.extend((STEP, c, c is after) for c in s.tried.get(STEP, []))
    return after


def cycling_run(runner, inputs: list[dict], npz_path: str):
    """A call that runs the next of the first samples of ``npz_path`` each time (the same order for every
    candidate of a measurement)."""
    from edgeopt.bench.early_exit import feeds_of_npz
    from edgeopt.runtime.measure import npz_samples

    samples = feeds_of_npz(inputs, npz_path, min(MEASURE_SAMPLES, npz_samples(inputs, npz_path)))
    turn = itertools.cycle(samples)
    return lambda: runner.run(next(turn))


def has_cascade(artifacts) -> bool:
    return any((Path(a) / "cascade.json").is_file() for a in artifacts)
