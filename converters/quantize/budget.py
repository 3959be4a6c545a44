"""The budgeted judge of the INT8 search: scores candidates against the accuracy bound within a time budget,
selects on the search part and confirms on the held-back part, with a progress bar."""

from __future__ import annotations

import time

import numpy as np

from edgeopt.errors import EdgeoptError, GateFailedError, UsageError
from edgeopt.metrics.confidence import (
    DEFAULT_CONFIDENCE,
    Looks,
    counted_parts,
    drop_upper,
    look_confidence,
    paired_upper,
)
from edgeopt.metrics.halves import HALVES_PERCENTILE, one_in, percentile_drop
from edgeopt.validation_model import eval_too_small, ordinal, sample_points, small_eval_warning, within_bound

from .candidate import Build, Candidate
from .eval_parts import given_order, part_metrics
from .task_metric import metric_name, metric_unit

HALVES_MIN_S = 2.0  # the halves rule's metric calls are always made in the search when they take under this


MAX_LOOKS = 5  # looks at the held-back part for a metric without a count (its 5th at 0.994 for 0.75)


class BudgetedSearch:
    """Scores candidates against the bound within a time budget, with a progress bar."""

    def __init__(self, *, fp32_run, search, confirm, bound: float, budget_s: float, progress=None,
                 what: str = "INT8 search", labels: bool | None = None, metric_spec=None, search_path=(),
                 whole=None, confidence: float = DEFAULT_CONFIDENCE, looks: Looks | None = None):
        from edgeopt.metrics.custom import mark

        self.metric_mark = mark()  # a user metric's calls during this search are reported (report's metric_time)
        self.search, self.confirm, self.bound = search, confirm, float(bound)
        self.confidence = float(confidence)
        self.held_looks = looks if looks is not None else Looks()  # the run's looks at the held-back part, shared
        self.budget_s = float(budget_s)
        self.m_search, self.m_confirm, self.m_all, self.halves = part_metrics(fp32_run, search, confirm, metric_spec,
                                                                              search_path, whole)
        self.points = sample_points(self.m_all.kind, self.m_all.unit, self.m_all.samples)
        if self.points is None and counted_parts(self.m_all):  # a decision among regressions: one sample's worth
            self.points = 100.0 / max(1, self.m_all.samples)
        self.refuse_if_too_small()
        self.given_order = given_order(search, confirm)
        self.t0 = time.perf_counter()
        self.costs: list[float] = []
        self.tried: list[dict] = []
        self.stopped_by_budget = False
        self.what = what
        self._bar_cm = progress(what, max(1, int(round(self.budget_s)))) if progress is not None else None
        self._bar = self._bar_cm.__enter__() if self._bar_cm is not None else None
        self._ticked = 0
        self.report: dict = {
            "metric": metric_name(self.m_search),
            "metric_description": getattr(self.m_search, "description", None),
            "metric_unit": metric_unit(self.m_search),
            "metric_outputs": [p.choice() for p in getattr(self.m_all, "parts", None) or [self.m_all]
                               if hasattr(p, "choice")],
            "labels": labels if labels is not None else getattr(search, "labels", None) is not None,
            "bound_points": self.bound,
            "search_samples": len(search),
            "confirm_samples": len(confirm),
            "fp32": {"search": self.m_search.fp32_value, "confirm": self.m_confirm.fp32_value,
                     "all": self.m_all.fp32_value},
            "confidence": self.confidence,
            "acceptance": self.acceptance(),
            "budget_s": self.budget_s,
            "tried": self.tried,
        }
        small = small_eval_warning(self.report["metric"], self.points, len(confirm), self.bound,
                                   look_confidence(self.confidence, self.looks + 1))
        if small:
            self.report["eval_too_small"] = small

    # ------------------------------------------------------------------ time
    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def left(self) -> float:
        return self.budget_s - self.elapsed()

    def can_afford(self, share: float = 1.0) -> bool:
        """Whether one more candidate (at the mean cost so far) still fits in ``share`` of the budget."""
        expected = float(np.mean(self.costs)) if self.costs else 0.0
        ok = self.elapsed() + expected <= self.budget_s * share
        if not ok and share >= 1.0:
            self.stopped_by_budget = True
        return ok

    def can_look(self) -> bool:
        """Whether one more look at the held-back part could confirm anything: for a metric that counts samples,
        a candidate that changes none of them is within the bound at the next look's confidence (a run's looks
        get stricter, :func:`edgeopt.metrics.confidence.look_confidence`); for the others, at most ``MAX_LOOKS``.
        When not, the search stops: its further choices could only be refused (``report['looks_spent']``)."""
        nxt = self.looks + 1
        level = look_confidence(self.confidence, nxt)
        if self.points is not None:
            upper = paired_upper(0, 0, len(self.confirm), level)  # a candidate that changes none of them
            ok = upper <= self.bound + 1e-9
            why = (f"a {ordinal(nxt)} look at the {len(self.confirm)} held-back samples, at {level:.3g} confidence, could not "
                   f"confirm even a candidate that changes none of them (up to {upper:.2f} points)")
        else:
            ok, why = nxt <= MAX_LOOKS, f"{MAX_LOOKS} looks at the held-back samples were taken"
        if not ok:
            self.report["looks_spent"] = why
        return ok

    def show(self, text: str) -> None:
        if self._bar is None:
            return
        done = min(int(self.elapsed()), max(1, int(round(self.budget_s))))
        if done > self._ticked:
            self._bar.advance(done - self._ticked)
            self._ticked = done
        describe = getattr(self._bar, "describe", None)
        if describe is not None:
            describe(f"{self.what}: {text} ({max(0.0, self.left()):.0f} s left)")

    def close(self) -> None:
        if self._bar_cm is not None:
            self._bar_cm.__exit__(None, None, None)
            self._bar_cm = self._bar = None

    # ------------------------------------------------------------------ scoring
    def drop(self, value: float, confirm: bool = False) -> float:
        ref = (self.m_confirm if confirm else self.m_search).fp32_value
        return float(ref - value)

    def why_missed(self, c: Candidate) -> str:
        """Why ``c`` (judged) is over the bound: the part, the drop, and its upper confidence limit."""
        if c.confirm_value is None:
            upper = "" if c.search_upper is None else f", up to {c.search_upper:.2f} at {self.confidence:g} confidence"
            return f"drop {self.drop(c.search_value):.2f} points on the search part{upper} (bound {self.bound:g})"
        if c.confirm_upper is not None and c.confirm_upper > self.bound + 1e-9:
            return (f"drop {self.drop(c.confirm_value, True):.2f} points on the held-back part, up to "
                    f"{c.confirm_upper:.2f} at {c.confirm_level:.3g} confidence "
                    f"(bound {self.bound:g})")
        if c.all_upper is not None and c.all_upper > self.bound + 1e-9:
            return (f"drop {self.m_all.fp32_value - c.all_value:.2f} points on all {self.m_all.samples} eval samples, "
                    f"up to {c.all_upper:.2f} at {self.confidence:g} confidence (bound {self.bound:g})")
        if self.drop(c.confirm_value, True) > self.bound:
            return f"drop {self.drop(c.confirm_value, True):.2f} points on the held-back part (bound {self.bound:g})"
        if c.halves_p90 is not None and c.halves_p90 > self.bound + 1e-9:
            return (f"drop {self.m_all.fp32_value - c.all_value:.2f} points on all {self.m_all.samples} eval samples "
                    f"but {c.halves_p90:.2f} on 1 in {one_in()} of their random halves: the eval "
                    "data can't show it holds "
                    f"(bound {self.bound:g})")
        return (f"drop {self.m_all.fp32_value - c.all_value:.2f} points on all {self.m_all.samples} eval samples, "
                f"with one sample's {self.points or 0:.3g} points of room (bound {self.bound:g})")

    def acceptance(self) -> str:
        """The rule a candidate is accepted by, in words (the report's ``acceptance``)."""
        if self.m_all.per_sample is None:  # a user's metric: point drops and the halves rule
            return (f"drop <= {self.bound:g} on the search part and on the held-back part, on all "
                    f"{self.m_all.samples} eval samples, and on {HALVES_PERCENTILE} % of {len(self.halves)} random "
                    "halves of them (a metric without per-sample scores: no confidence limit)")
        how = ("Tango's paired score limit, not below the exact limit of the lost share when none is gained"
               if self.points is not None
               else "a seeded bootstrap of the per-sample drop")
        return (f"the search part selects (drop <= {self.bound:g} there); the held-back part ({len(self.confirm)} "
                f"samples) confirms: the upper confidence limit of the drop ({how}) within the bound at "
                f"{self.confidence:g} confidence, shared over its looks (the k-th look at "
                f"1 - {1 - self.confidence:.3g} * 6/(pi^2 k^2)), and on all {self.m_all.samples} eval samples at "
                f"{self.confidence:g} (the convert gate's judgement)")

    @property
    def looks(self) -> int:
        """The run's looks at the held-back part so far (this search's and those before it)."""
        return self.held_looks.count

    def refuse_if_too_small(self) -> None:
        """Exit 5 before any candidate is built when the held-back part is too small for even a candidate that
        changes no sample's outcome to be confirmed (a metric that counts samples), naming the samples needed."""
        if self.points is None:
            return
        fraction = len(self.search) / max(1, len(self.search) + len(self.confirm))
        err = eval_too_small(self.report_name(), len(self.confirm), self.bound,
                             look_confidence(self.confidence, self.looks + 1), self.confidence, fraction,
                             self.looks + 1)
        if err is not None:
            raise err

    def report_name(self) -> str:
        return metric_name(self.m_all)

    def _digests(self, run, part) -> list:
        return [self.m_all.digest(run(part.feed(i))) for i in range(len(part))]

    def select(self, run, searched: list | None = None) -> Candidate:
        """``run`` scored on the search part, where the search looks many times: ``met`` when the upper confidence
        limit of its drop there is within the bound (the drop itself, for a metric without per-sample scores).
        ``searched``: the search part's digests when already computed."""
        searched = self._digests(run, self.search) if searched is None else searched
        c = Candidate("", search_value=float(self.m_search.score_digests(searched)), run=run, searched=searched)
        c.search_upper = drop_upper(self.m_search, searched, self.confidence)
        c.met = within_bound(self.drop(c.search_value), self.bound, upper=c.search_upper)
        return c

    def confirm_choice(self, c: Candidate, counted: bool = True) -> Candidate:
        """The held-back part's confirmation of a candidate the search selected (:mod:`.strategy`'s module doc): the upper
        confidence limit of its drop there within the bound, at this look's share of the confidence
        (:func:`edgeopt.metrics.confidence.look_confidence`; ``counted`` False: a figure that chooses nothing, at
        the confidence itself), and on all the eval samples, the convert gate's judgement. Sets ``met``."""
        held = self._digests(c.run, self.confirm)
        if counted:
            self.held_looks.count += 1
        level = look_confidence(self.confidence, self.looks) if counted else self.confidence
        searched = c.searched
        t = time.perf_counter()
        c.confirm_value = float(self.m_confirm.score_digests(held))
        c.all_value = float(self.m_all.score_digests(searched + held))
        per_call_s = (time.perf_counter() - t) / 2
        c.confirm_upper = drop_upper(self.m_confirm, held, level)
        c.all_upper = drop_upper(self.m_all, searched + held, self.confidence, self.given_order)
        c.confirm_level = level
        drop_all = self.m_all.fp32_value - c.all_value
        if c.confirm_upper is not None and c.all_upper is not None:  # the confidence bound (.strategy's module doc)
            c.met = (within_bound(self.drop(c.confirm_value, True), self.bound, upper=c.confirm_upper)
                     and within_bound(drop_all, self.bound, upper=c.all_upper))
            return c
        # a metric without per-sample scores (a user's own): the point drops, and the halves rule
        c.met = self.drop(c.confirm_value, True) <= self.bound and within_bound(drop_all, self.bound, self.points)
        if c.met and self.halves and not self.halves_deferred(per_call_s):
            c.halves_p90 = self.halves_drop(searched + held)
            c.met = c.halves_p90 <= self.bound + 1e-9
        return c

    def halves_deferred(self, per_call_s: float) -> bool:
        """Whether the halves rule is left to the final validation (which applies it to the written artifact
        anyway): when its metric calls (``per_call_s`` each, as the confirmation's took) don't fit what is left
        of ``--search-budget`` and take over ``HALVES_MIN_S``. A metric of 2 s a call would spend 80 s on 40
        calls under a 5 s budget. Said in the report's ``halves_rule``."""
        calls = len(self.halves) * (1 if self.halves.scored else 2)
        cost = calls * per_call_s
        if cost <= max(self.left(), HALVES_MIN_S):
            return False
        self.report["halves_rule"] = (
            f"left to the final validation: the metric took {per_call_s:.2g} s a call, and the halves rule's "
            f"{calls} calls (about {cost:.0f} s) don't fit what is left of the {self.budget_s:g} s search budget "
            "(--search-budget)")
        return True

    def judge(self, run, searched: list | None = None, counted: bool = True) -> Candidate:
        """``run`` selected on the search part and, when it is, confirmed on the held-back part
        (:meth:`select`, :meth:`confirm_choice`): the one judgement every search here makes of a model it keeps
        (a rebuilt hit, a hit at another precision hint; ``counted`` False: a float precision only named)."""
        c = self.select(run, searched)
        return self.confirm_choice(c, counted) if c.met else c

    def halves_drop(self, digests: list) -> float:
        """The drop at the 90th percentile over the random halves of the eval samples (``digests``: both parts'
        digests, in the order of :func:`.eval_parts.part_metrics`' ``both``)."""
        return percentile_drop(m.fp32_value - m.score_digests([digests[i] for i in idx])
                               for idx, m in self.halves.get())

    def fmt(self, value: float | None) -> str:
        unit = metric_unit(self.m_search)
        return "n/a" if value is None else f"{value:.2f}{' dB' if unit == 'dB' else ' %' if unit == '%' else ''}"

    def evaluate(self, label: str, build: Build, kept: tuple[str, ...] = ()) -> Candidate:
        """Build one candidate and score it on the search part only (:meth:`select`); the held-back part confirms
        the search's choice once (:func:`.verdict.finish`)."""
        self.show(f"building {label}")
        t = time.perf_counter()
        artifact, run = build()
        c = self.select(run)
        c.label, c.kept, c.artifact = label, tuple(kept), artifact
        entry = {"what": label, "search_value": round(c.search_value, 4),
                 "search_drop_points": round(self.drop(c.search_value), 3), "kept_in_float": len(kept),
                 "search_drop_upper": c.search_upper, "selected": c.met}
        c.entry = entry
        c.seconds = time.perf_counter() - t
        entry["seconds"] = round(c.seconds, 2)
        self.costs.append(c.seconds)
        self.tried.append(entry)
        self.show(f"{label}: {metric_name(self.m_search)} {self.fmt(c.search_value)} "
                   f"(FP32 {self.fmt(self.m_search.fp32_value)}, bound {self.bound:g})")
        return c

    def evaluate_or_miss(self, label: str, build: Build, kept: tuple[str, ...] = ()) -> Candidate:
        """:meth:`evaluate`, where a candidate the quantizer fails to build counts as a miss (no artifact, a drop
        of infinity) in the report's ``tried`` with the quantizer's reason: one more op set in float is then tried,
        as after any miss, instead of the failure ending the backend's search."""
        t = time.perf_counter()
        try:
            return self.evaluate(label, build, kept)
        except (GateFailedError, UsageError):
            raise
        except EdgeoptError as err:
            self.tried.append({"what": label, "kept_in_float": len(kept), "not_built": err.message, "selected": False,
                               "seconds": round(time.perf_counter() - t, 2)})
            self.show(f"{label}: not built ({err.message})")
            return Candidate(label, tuple(kept), search_value=float("-inf"), entry=self.tried[-1],
                             not_built=err.message)
