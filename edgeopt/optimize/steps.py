"""The steps of ``optimize`` in order (module doc of :mod:`.optimizer`): baseline, fusion, pruned/recovered, int8,
float, early-exit, each from the incumbent the step before kept; the trail of every candidate for the waterfall."""

from __future__ import annotations

from edgeopt.errors import EdgeoptError
from edgeopt.optimize.candidate_bench import STEP_MEASURE, CandidateBench
from edgeopt.optimize.candidates import folded, target_fields, target_label
from edgeopt.optimize.result import Candidate
from edgeopt.runtime.reference import REFERENCE

RECOVER_BUDGET_MAX_S = 120.0  # the recover stage's own default
RECOVER_BUDGET_SHARE = 0.25  # at most this share of optimize's time left goes to the prune-ratio search
RECOVER_BUDGET_MIN_S = 10.0
FUSION_TIE = 0.05  # fusion is lossless: kept unless measured more than 5 % slower (short runs are noisy)


def run_steps(s: CandidateBench, backends: list[str]) -> list[dict]:
    """Run the steps; returns the incumbent after each step (for the waterfall)."""
    trail = []
    base_f = {"backend": REFERENCE, "precision": "fp32", "stages": {"normalize": {"fold": False}}}
    inc = s.build("baseline", target_label(base_f), **base_f)
    if inc.error:  # the baseline's own error, with its exit code and hint (bad data is not a model problem)
        err = getattr(s, "last_error", None)
        if isinstance(err, EdgeoptError):
            raise err
        from edgeopt.errors import StageError

        raise StageError(f"the baseline (ONNX Runtime FP32) failed: {inc.error}",
                         "--debug shows the traceback") from err
    s.measure([inc], STEP_MEASURE)
    trail.append(("baseline", inc))
    f = {"backend": REFERENCE, "precision": "fp32"}
    inc = s.step("fusion", inc, [(target_label(f), f)], prefer_new=FUSION_TIE)
    trail.extend(("fusion", c, c is inc) for c in s.tried.get("fusion", []))  # the fused build, kept or not
    inc = prune_steps(s, inc, trail)
    before_precision = inc
    inc = precision_steps(s, inc, backends, trail)
    from edgeopt.optimize.early_exit import early_exit_step

    inc = early_exit_step(s, inc, before_precision, trail)
    return [{"step": t[0], "candidate": t[1], "kept": t[2] if len(t) > 2 else True} for t in trail]


def precision_steps(s: CandidateBench, inc: Candidate, backends: list[str], trail: list) -> Candidate:
    """``int8`` (each mode x backend that fits the graph; accuracy-aware only when none holds the bound) and
    ``float`` (each native float precision x backend); every candidate a waterfall row."""
    from edgeopt.model import load_onnx
    from edgeopt.optimize.candidates import accuracy_aware_option, base_fields, float_options, int8_options

    base = base_fields(target_fields(inc, **_fixed_ratio(inc)))  # a recovered student: its ratio, recovered again
    options, notes = int8_options(load_onnx(s.model), backends, base)
    s.skipped.extend(notes)
    best = s.step("int8", inc, [(target_label(f), f) for f in options])
    near = [c for c in s.tried.get("int8", []) if c.accuracy_drop is not None]
    if not any(c.feasible for c in near):  # none met the bound: accuracy-aware on the nearest backend
        if near:
            aa = accuracy_aware_option(min(near, key=lambda c: c.accuracy_drop).target, base)
            best = s.step("int8", best, [(target_label(aa), aa)])
    have = (inc.target.get("backend", REFERENCE), inc.target.get("precision", "fp32"))
    after = s.step("float", best, [(target_label(f), f) for f in float_options(s.profile, backends, base, have=have)])
    for step, kept in (("int8", best), ("float", after)):
        trail.extend((step, c, c is kept) for c in s.tried.get(step, []))
    return after


def _chosen_ratio(c: Candidate) -> float | None:
    """The ratio ``--prune auto`` chose for candidate ``c`` (from its manifest), None when it did not prune."""
    from edgeopt.artifact import load_artifact

    if not c.artifact:
        return None
    stage = next((st for st in load_artifact(c.artifact).stages if st.name == "prune"), None)
    ratio = stage.report.get("ratio") if stage is not None else None
    return float(ratio) if ratio else None


def _fixed_ratio(inc: Candidate) -> dict:
    """Fields that rebuild ``inc``'s auto-chosen prune at its ratio (empty when ``inc`` is not an auto prune)."""
    if inc.target.get("prune") != "auto":
        return {}
    ratio = _chosen_ratio(inc)
    return {"prune": ratio} if ratio else {"prune": None, "recover": None, "search_budget": None}


def prune_steps(s: CandidateBench, inc: Candidate, trail: list) -> Candidate:
    """``pruned`` and ``recovered``: --prune auto on the incumbent, its search budget (recovery included) capped by
    optimize's budget;
    the chosen ratio built without recovery too (measured, shown in the waterfall, kept only if it is best)."""
    from edgeopt.converters.recover import train_extra_missing

    if not s.calib:
        s.skipped.append("prune: --prune auto needs --calib (it prunes and recovers on it)")
        return inc
    missing = train_extra_missing()
    if missing:
        s.skipped.append(f"recover: {missing} is not installed (pip install 'edgeopt[train]'): pruning is searched "
                         "without recovery")
    budget = max(RECOVER_BUDGET_MIN_S, min(RECOVER_BUDGET_MAX_S, RECOVER_BUDGET_SHARE * s.left_s()))
    auto = folded(target_fields(inc, prune="auto", recover=not missing, search_budget=round(budget)))
    if s.left_s() <= 0:
        s.skipped.append("prune: time budget spent")
        return inc
    searched = s.build("recovered" if not missing else "pruned", target_label(auto), **auto)
    ratio = _chosen_ratio(searched)
    cands = [searched]
    if ratio and not missing and s.left_s() > 0:
        plain = folded(target_fields(inc, prune=ratio, recover=False))
        cands.insert(0, s.build("pruned", target_label(plain), **plain))
    elif not ratio and not searched.error:
        s.skipped.append("prune: no ratio stayed within the bound on the held-back calibration data")
    s.measure([inc, *cands], STEP_MEASURE)
    pool = [c for c in (inc, *cands) if c.feasible and c.p50_ms is not None]
    best = min(pool, key=lambda c: c.p50_ms) if pool else inc
    for c in cands:
        trail.append((c.step, c, c is best))
    return best
