"""The INT8 search's verdict: its choice confirmed on the held-back part, the report finished, and the gate
failure (exit 5) for a search that found nothing within the bound."""

from __future__ import annotations

from edgeopt.errors import GateFailedError
from edgeopt.metrics.all_outputs import worst_part

from .budget import BudgetedSearch
from .candidate import Candidate, SearchResult


def confirmed(s: BudgetedSearch, c: Candidate, counted: bool = True) -> bool:
    """The search's choice ``c`` confirmed once on the held-back part (:meth:`.budget.BudgetedSearch.confirm_choice`), its
    figures added to its row of ``tried``; why not in the report's ``not_confirmed``. No look is taken when none
    could confirm anything (:meth:`.budget.BudgetedSearch.can_look`): the choice is then refused unlooked."""
    if counted and not s.can_look():
        c.met = False
        s.report["not_confirmed"] = f"{c.label}: not looked at: {s.report['looks_spent']}"
        return False
    s.confirm_choice(c, counted)
    if c.entry is not None:
        c.entry.update(confirm_value=round(c.confirm_value, 4),
                       confirm_drop_points=round(s.drop(c.confirm_value, True), 3),
                       all_drop_points=round(s.m_all.fp32_value - c.all_value, 3), met=c.met,
                       **({} if c.confirm_upper is None else {"confirm_drop_upper": c.confirm_upper,
                                                              "all_drop_upper": c.all_upper}),
                       **({} if c.halves_p90 is None else {"halves_drop_p90": c.halves_p90}))
    if not c.met:
        s.report["not_confirmed"] = f"{c.label}: {s.why_missed(c)}"
    return c.met


def finish(s: BudgetedSearch, best: Candidate | None, closest: Candidate, ranked) -> SearchResult:
    """The search's result: ``best`` confirmed on the held-back part unless the search already did
    (its ``confirm_value`` set), the report finished."""
    if best is not None and not (best.met if best.confirm_value is not None else confirmed(s, best)):
        closest, best = best, None
    chosen = best or closest
    s.report.update(
        met=best is not None,
        chosen=chosen.label,
        search_value=round(chosen.search_value, 4),
        search_drop_points=round(s.drop(chosen.search_value), 3),
        confirm_value=None if chosen.confirm_value is None else round(chosen.confirm_value, 4),
        confirm_drop_points=None if chosen.confirm_value is None else round(s.drop(chosen.confirm_value, True), 3),
        all_drop_points=None if chosen.all_value is None else round(s.m_all.fp32_value - chosen.all_value, 3),
        confirm_drop_upper=chosen.confirm_upper, all_drop_upper=chosen.all_upper, confirm_looks=s.looks,
        kept_in_float_count=len(chosen.kept),
        quantized_ops_ranked=len(ranked) if ranked else None,
        search_seconds=round(s.elapsed(), 2),
        stopped_by_budget=s.stopped_by_budget,
        candidates=len(s.tried),
    )
    from edgeopt.metrics.custom import spent_since

    if (spent := spent_since(s.metric_mark)) is not None:
        s.report["metric_time"] = spent
    return SearchResult(best, closest, ranked, s.report, s.m_confirm, s.m_search, s.judge)


def gate_failure(prefix: str, result: SearchResult, bound: float) -> GateFailedError:
    """The exit-5 error for a search that found nothing within the bound: best metric and float share."""
    r, c = result.report, result.closest
    unit = " dB" if r.get("metric_unit") == "dB" else " %" if r.get("metric_unit") == "%" else ""
    where = (f"within its {r['budget_s']:g} s search budget ({r['candidates']} candidates)" if r.get("stopped_by_budget")
             else f"after {r['candidates']} candidates")
    total = r.get("quantized_ops_ranked")
    kept = f"{len(c.kept)} of {total} ops kept in float" if total else f"{len(c.kept)} ops kept in float"
    if c.kept:
        kept += " (" + ", ".join(c.kept[:3]) + (f" and {len(c.kept) - 3} more" if len(c.kept) > 3 else "") + ")"
    held = ("" if c.confirm_value is None else
            f", held-back {c.confirm_value:.2f}{unit} vs {r['fp32']['confirm']:.2f}{unit}")
    worst = worst_part(result.m_search, c.searched) if result.m_search is not None else ""
    worst = f"; the worst output: {worst}" if worst else ""
    most = max((t.get("kept_in_float", 0) for t in r.get("tried", ()) if "not_built" not in t), default=0)
    if most > len(c.kept):  # the best was not the one with most ops in float: say what else was tried
        kept += f"; candidates with up to {most} ops in float were tried and scored lower"
    not_built = [t for t in r.get("tried", ()) if "not_built" in t]
    if not_built:  # the quantizer's own failure on those op sets (BudgetedSearch.evaluate_or_miss)
        kept += (f"; {len(not_built)} candidate(s) the quantizer could not build ({not_built[0]['not_built']}), "
                 "counted as misses")
    if r.get("only_all_float_meets"):
        kept += "; only with every op in float (the FP32 model) was the bound met"
    if r.get("not_confirmed"):
        kept += f"; the search's choice was not confirmed on the held-back part ({r['not_confirmed']})"
    if r.get("looks_spent"):
        kept += f"; the search stopped: {r['looks_spent']}"
    budget_hint = "raise --search-budget, " if r.get("stopped_by_budget") else ""  # only when the budget stopped it
    if r.get("looks_spent"):
        budget_hint += "give more --eval samples, "
    return GateFailedError(
        f"{prefix}: INT8 misses --max-accuracy-drop {bound:g} {where}: best {r['metric']} "
        f"{c.search_value:.2f}{unit} vs FP32 {r['fp32']['search']:.2f}{unit} on the search part "
        f"(drop {r['fp32']['search'] - c.search_value:.2f}{worst}){held}, with {kept}",
        f"{budget_hint}relax --max-accuracy-drop, or keep FP32 (--precision fp32)", details=r)
