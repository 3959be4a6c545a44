"""The budgeted accuracy-aware INT8 search every quantizing backend shares.

1. The quantizer's own options, in the order given (the preset first): the first one that keeps the
   metric within the bound on the search part *and* on the held-back part wins. An option's build may carry
   ``skip_when(scored: {label: Candidate}) -> reason | None``: the options scored before it can make it
   pointless (reported under ``options_skipped``).
2. Otherwise per-op float fallback over the best option: its ops are ranked **once** by a cheap
   sensitivity measure (``rank``), then the number ``k`` of most sensitive ops kept in float grows
   1, 2, 4, 8, … until a candidate meets the bound, and is bisected between the last miss and that
   hit. A candidate is built by the backend's own quantizer with those ops excluded
   (``nodes_to_exclude`` / NNCF ``ignored_scope``), so its calibration and fusions stay right.
   With a ``FloatPrefix`` (ONNX Runtime's ``tensorrt`` preset) the fallback starts from its option (Q/DQ at the
   weighted ops only, which is what TensorRT fuses) and first keeps a graph-order prefix of that option's weighted
   ops in float, its length bisected from half of them (the option itself missed, all of them in float is FP32):
   where INT8 loses in the early layers' activation tails (DBNet's first HardSwish blocks), a per-op ranking picks
   ops one at a time and runs out of budget before it reaches them, and bisecting from the half finds a hit within
   two candidates where one exists past it (a loaded machine's 60 s hold few 4-15 s candidates). Without a prefix
   hit, the ranking follows on that option.
3. Every candidate is scored on the search part only, where the search looks many times: it is selected when
   the upper confidence limit of its drop there (:mod:`edgeopt.metrics.confidence`, at ``--confidence``: Tango's
   paired score limit for a metric that counts samples, a seeded bootstrap of the per-sample drop for the others)
   is within the bound. The search's choice is then confirmed once on the held-back part, never seen by the
   search (:func:`confirmed`, :meth:`BudgetedSearch.confirm_choice`; the mode search of :mod:`.bound` too): the
   upper limit there within the bound, and on all the eval samples, the convert gate's own judgement
   (:func:`edgeopt.validation_model.within_bound`). A choice not confirmed ends the search without a result.
   Each further look at the held-back part (a rebuilt hit, a hit at another precision hint) is at a smaller risk
   (:func:`edgeopt.metrics.confidence.look_confidence`), so all looks together keep the confidence. A point
   estimate on few samples is not enough: a CTC recogniser's searches picked among many candidates on 50 lines,
   confirmed on 50 others, and lost 3.5 and 6.5 points of exact match on unseen lines with a 2-point bound.
   A held-back part too small to confirm even a candidate that changes no sample is refused before any work,
   naming the eval size needed (:func:`edgeopt.validation_model.eval_too_small`, exit 5). A user's metric without
   per-sample scores is judged by its point drops and on 9 of 10 random halves of all the eval samples
   (:func:`half_metrics`). The metric's kind is chosen once, on the whole eval set as the gate chooses it, and
   judges both parts the same way.

A time budget bounds the whole search: a candidate is not started when the time already spent plus
what a candidate has cost so far would pass it (the first option always runs, so there is always a
figure to report). The options may use half of it, so the float fallback always gets its turn; the
ranking stops early enough to leave room for two candidates (ops it had no time for rank last). Out of budget or out of candidates, :class:`GateFailedError` (exit 5) names the
best metric reached and how much was kept in float; nothing is written. A hit with every op in float is the
FP32 model, not an INT8 result: it bounds the bisection but is a gate failure too (the message says so).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from edgeopt.errors import EdgeoptError, GateFailedError, UsageError
from edgeopt.metrics.confidence import DEFAULT_CONFIDENCE, drop_upper, look_confidence
from edgeopt.metrics.halves import HALVES_PERCENTILE, half_indices, one_in, percentile_drop
from edgeopt.validation_model import eval_too_small, sample_points, small_eval_warning, within_bound

from .sensitivity import UNRANKED

HALVES_MIN_S = 2.0  # the halves rule's metric calls are always made in the search when they take under this
OPTIONS_SHARE = 0.5  # the quantizer's options may use half the budget; the float fallback gets the rest

Rank = Callable[[Any, float], list]  # (option's artifact, deadline on time.perf_counter()) -> [(op, score)], best first
Build = Callable[[], tuple[Any, Callable]]  # () -> (artifact, run function feed -> {name: array})


def make_task_metric(fp32_run, dataset, spec=None, search_path=()):
    """The task metric for ``dataset`` (``edgeopt.metrics.make_metric``; ``spec``: the stage bound's ``--metric``,
    None: chosen from the output and the data): ``.score(run, ds)``, ``.fp32_value``, ``.name``."""
    from edgeopt.metrics import make_metric

    return make_metric(fp32_run, dataset, spec, search_path=list(search_path))


def joined(a, b):
    """The two parts of the eval data as one data set (``a``'s samples, then ``b``'s)."""
    from edgeopt.data import Dataset

    labels = None if a.labels is None or b.labels is None else np.concatenate([a.labels, b.labels])
    positions = None if a.positions is None or b.positions is None else np.concatenate([a.positions, b.positions])
    return Dataset({k: np.concatenate([v, b.arrays[k]]) for k, v in a.arrays.items()}, labels, a.source,
                   a.synthetic, dict(a.ranks), list(a.notes), positions)


def _replay(outputs: list):
    """A run function that gives ``outputs`` back in order: FP32 run once per sample, scored by several metrics."""
    it = iter(outputs)
    return lambda feed: next(it)




def part_metrics(fp32_run, search, confirm, spec=None, search_path=(), whole=None):
    """The metric of the search part, the held-back part and both together, of one kind: chosen once, on
    ``whole`` (the eval data as given, as the convert gate chooses it; default both parts together), then fixed
    for the parts. Chosen on each part alone, a borderline choice can differ between them (a recogniser whose
    FP32 argmax is the CTC blank at 48 % of positions on one half and 51 % on the other was searched by
    per-position agreement and confirmed by CTC exact match). Returns the three metrics and
    :func:`half_metrics` over both parts (empty for a metric that counts samples)."""
    from edgeopt.metrics import pinned_spec
    from edgeopt.metrics.flags import declared_kind

    s_out = [fp32_run(search.feed(i)) for i in range(len(search))]
    c_out = [fp32_run(confirm.feed(i)) for i in range(len(confirm))]
    both = joined(search, confirm)
    pinned = spec  # a kind the user named
    if declared_kind(spec) is None:  # chosen from FP32's outputs: once, as the gate chooses it
        chooser = (make_task_metric(fp32_run, whole, spec, search_path) if whole is not None
                   else make_task_metric(_replay(s_out + c_out), both, spec, search_path))
        pinned = pinned_spec(spec, chooser)
    m_all = make_task_metric(_replay(s_out + c_out), both, pinned, search_path)
    counted = sample_points(m_all.kind, m_all.unit, m_all.samples) is not None
    return (make_task_metric(_replay(s_out), search, pinned, search_path),
            make_task_metric(_replay(c_out), confirm, pinned, search_path), m_all,
            LazyHalves() if counted or m_all.per_sample is not None else
            LazyHalves(lambda: half_metrics(s_out + c_out, both, pinned, search_path),
                       len(half_indices(len(both), order=both.positions))))


class LazyHalves:
    """The halves rule's FP32 halves (:func:`half_metrics`), scored at the first confirmation that needs them: a
    slow user metric's calls are spent on a choice to confirm, not before the search starts. ``count``: the
    halves there will be (0: no halves rule)."""

    def __init__(self, make: Callable[[], list] | None = None, count: int = 0):
        self._make, self.count, self._scored = make, count, None

    def __len__(self) -> int:
        return self.count

    @property
    def scored(self) -> bool:
        return self._scored is not None

    def get(self) -> list:
        if self._scored is None:
            self._scored = self._make() if self._make is not None else []
            self.count = len(self._scored)
        return self._scored


def half_metrics(outputs: list, both, spec, search_path) -> list:
    """The halves rule's (:mod:`edgeopt.metrics.halves`) random halves of the eval samples, each ``(indices,
    metric on that half)``: the halves the validation draws on the eval data as given, at their positions in
    ``both`` (a shuffle of it), so the convert gate judges the search's choice on the same halves. Empty when the
    eval data is too small to halve or a half can't be scored (a user's metric may need every label present)."""
    out = []
    for idx in half_indices(len(both), order=both.positions):
        try:
            m = make_task_metric(_replay([outputs[i] for i in idx]), both.subset(idx), spec, search_path)
        except (GateFailedError, UsageError):
            raise
        except Exception:  # noqa: BLE001 - a user's metric that can't score a half: no spread, the other rules hold
            return []
        out.append((idx, m))
    return out


def _given_order(search, confirm) -> np.ndarray | None:
    """Where each sample of the eval data as given sits in ``search`` + ``confirm`` (a shuffle of it), so the
    bootstrap on all the samples draws what the convert gate's draws on the data as given; None: not a shuffle."""
    if search.positions is None or confirm.positions is None:
        return None
    positions = np.concatenate([search.positions, confirm.positions])
    if sorted(positions.tolist()) != list(range(len(positions))):
        return None
    return np.argsort(positions)


def metric_name(m) -> str:
    return getattr(m, "name", None) or getattr(m, "kind", "metric")


def metric_unit(m) -> str:
    return getattr(m, "unit", "%")


@dataclass
class Candidate:
    label: str
    kept: tuple[str, ...] = ()
    search_value: float | None = None
    confirm_value: float | None = None
    all_value: float | None = None  # on both parts together
    search_upper: float | None = None  # the upper confidence limit of the drop on the search part
    confirm_upper: float | None = None  # ... on the held-back part (at confirm_level)
    confirm_level: float | None = None
    all_upper: float | None = None  # ... on all the eval samples (the convert gate's judgement)
    halves_p90: float | None = None  # the drop at the 90th percentile of random halves of both (HALVES)
    seconds: float = 0.0
    entry: dict | None = field(default=None, repr=False)  # its row in the report's ``tried``
    artifact: Any = None
    met: bool = False  # selected on the search part; once confirm_choice ran, confirmed as well
    run: Any = field(default=None, repr=False)  # its run function (the held-back confirmation runs it)
    searched: list = field(default_factory=list, repr=False)  # its search-part digests


@dataclass
class SearchResult:
    best: Candidate | None  # the candidate that met the bound on both parts (None: none did)
    closest: Candidate  # the best search-part figure reached (what the gate failure names)
    ranked: list[tuple[str, float]] = field(default_factory=list)
    report: dict = field(default_factory=dict)
    m_confirm: Any = None  # the metric on the held-back part (for checking other precisions the same way)
    m_search: Any = None
    judge: Callable | None = None  # BudgetedSearch.judge: a run scored and confirmed the one way (a rebuilt hit)


@dataclass(frozen=True)
class FloatPrefix:
    """Float fallback by graph order (module doc, 2.): the best scored of options ``bases`` (their indices in the
    options; the first is always scored) with the first ``k`` of ``ops(artifact)`` (its quantized weighted ops, in
    graph order) in float, ``k`` bisected from half of them."""
    bases: tuple[int, ...]
    ops: Callable[[Any], list[str]]

    def base(self, results: dict) -> int | None:
        """The option the prefixes start from: the best scored of ``bases`` (None: none was scored)."""
        scored = [i for i in self.bases if i in results]
        return max(scored, key=lambda i: results[i].search_value) if scored else None


class BudgetedSearch:
    """Scores candidates against the bound within a time budget, with a progress bar."""

    def __init__(self, *, fp32_run, search, confirm, bound: float, budget_s: float, progress=None,
                 what: str = "INT8 search", labels: bool | None = None, metric_spec=None, search_path=(),
                 whole=None, confidence: float = DEFAULT_CONFIDENCE):
        from edgeopt.metrics.custom import mark

        self.metric_mark = mark()  # a user metric's calls during this search are reported (report's metric_time)
        self.search, self.confirm, self.bound = search, confirm, float(bound)
        self.confidence, self.looks = float(confidence), 0  # looks: confirmations made on the held-back part
        self.budget_s = float(budget_s)
        self.m_search, self.m_confirm, self.m_all, self.halves = part_metrics(fp32_run, search, confirm, metric_spec,
                                                                              search_path, whole)
        self.points = sample_points(self.m_all.kind, self.m_all.unit, self.m_all.samples)
        self.refuse_if_too_small()
        self.given_order = _given_order(search, confirm)
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
                                   look_confidence(self.confidence, 1))
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

    def _show(self, text: str) -> None:
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
                    f"{c.confirm_upper:.2f} at {look_confidence(self.confidence, self.looks):.3g} confidence "
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
        how = ("Tango's paired score limit" if self.points is not None
               else "a seeded bootstrap of the per-sample drop")
        return (f"the search part selects (drop <= {self.bound:g} there); the held-back part ({len(self.confirm)} "
                f"samples) confirms: the upper confidence limit of the drop ({how}) within the bound at "
                f"{self.confidence:g} confidence, shared over its looks (the k-th look at "
                f"1 - {1 - self.confidence:.3g} * 6/(pi^2 k^2)), and on all {self.m_all.samples} eval samples at "
                f"{self.confidence:g} (the convert gate's judgement)")

    def refuse_if_too_small(self) -> None:
        """Exit 5 before any candidate is built when the held-back part is too small for even a candidate that
        changes no sample's outcome to be confirmed (a metric that counts samples), naming the samples needed."""
        if self.points is None:
            return
        fraction = len(self.search) / max(1, len(self.search) + len(self.confirm))
        err = eval_too_small(self.report_name(), len(self.confirm), self.bound, look_confidence(self.confidence, 1),
                             self.confidence, fraction)
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
        """The held-back part's confirmation of a candidate the search selected (the module doc): the upper
        confidence limit of its drop there within the bound, at this look's share of the confidence
        (:func:`edgeopt.metrics.confidence.look_confidence`; ``counted`` False: a figure that chooses nothing, at
        the confidence itself), and on all the eval samples, the convert gate's judgement. Sets ``met``."""
        held = self._digests(c.run, self.confirm)
        if counted:
            self.looks += 1
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
        if c.confirm_upper is not None and c.all_upper is not None:  # the confidence bound (module doc)
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
        digests, in the order of :func:`part_metrics`' ``both``)."""
        return percentile_drop(m.fp32_value - m.score_digests([digests[i] for i in idx])
                               for idx, m in self.halves.get())

    def fmt(self, value: float | None) -> str:
        unit = metric_unit(self.m_search)
        return "n/a" if value is None else f"{value:.2f}{' dB' if unit == 'dB' else ' %' if unit == '%' else ''}"

    def evaluate(self, label: str, build: Build, kept: tuple[str, ...] = ()) -> Candidate:
        """Build one candidate and score it on the search part only (:meth:`select`); the held-back part confirms
        the search's choice once (:func:`_finish`)."""
        self._show(f"building {label}")
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
        self._show(f"{label}: {metric_name(self.m_search)} {self.fmt(c.search_value)} "
                   f"(FP32 {self.fmt(self.m_search.fp32_value)}, bound {self.bound:g})")
        return c


def run_search(*, options: list[tuple[str, Build]], rank: Rank | None,
               with_float: Callable[[int, tuple[str, ...]], Build] | None, fp32_run, search, confirm,
               bound: float, budget_s: float, progress=None, what: str = "INT8 search",
               sensitivity_method: str = "", metric_spec=None, search_path=(),
               quantizes: Callable[[Any], bool] | None = None, fallback_bases: int = 1, whole=None,
               float_prefix: FloatPrefix | None = None, confidence: float = DEFAULT_CONFIDENCE) -> SearchResult:
    """The search described in the module doc. ``with_float(option_index, kept)`` returns the build of
    option ``option_index`` with the ``kept`` op names in float. ``quantizes(artifact)``: whether a candidate still
    holds a quantized compute op; one that meets the bound without any is the FP32 model, like the candidate with
    every ranked op in float (the ranking may hold ops without weights, so fewer than all of them can leave none).
    ``fallback_bases``: on how many options, best first, the float fallback may run (while time is left) with the one
    ranking; more than 1 only where the ranked ops keep their names across the options (ONNX Runtime's nodes).
    ``whole``: the eval data as given, on which the metric's kind is chosen (:func:`part_metrics`).
    ``float_prefix``: the graph-order float fallback tried first, on its own option (module doc, 2.)."""
    s = BudgetedSearch(fp32_run=fp32_run, search=search, confirm=confirm, bound=bound, budget_s=budget_s,
                       progress=progress, what=what, metric_spec=metric_spec, search_path=search_path, whole=whole,
                       confidence=confidence)
    try:
        return _run(s, options, rank, with_float, sensitivity_method, quantizes, fallback_bases, float_prefix)
    finally:
        s.close()


def _run(s: BudgetedSearch, options, rank, with_float, sensitivity_method, quantizes=None,
         fallback_bases: int = 1, float_prefix: FloatPrefix | None = None) -> SearchResult:
    report = s.report
    results, done = _options(s, options, float_prefix.bases[0] if float_prefix is not None else None)
    if done is not None:
        return done
    order = sorted(results, key=lambda j: -results[j].search_value)
    closest = results[order[0]]  # the best option, whichever base the fallback starts from
    prefix_base = float_prefix.base(results) if float_prefix is not None else None
    if prefix_base is not None:  # its option is the fallback's first base
        order.remove(prefix_base)
        order.insert(0, prefix_base)
    base_i = order[0]
    base = results[base_i]
    report["quantizer_options"] = {"chosen": base.label}
    if prefix_base is not None and with_float is not None:
        hit, closest = _prefix_fallback(s, float_prefix, base_i, base, with_float, quantizes, closest)
        if hit is not None:
            return _finish(s, hit, closest, [])
    return _ranked_fallback(s, results, order, rank, with_float, sensitivity_method, quantizes, fallback_bases,
                            closest)


def _options(s: BudgetedSearch, options, must: int | None = None) -> tuple[dict[int, Candidate], SearchResult | None]:
    """The quantizer's options in order (module doc, 1.): ({option index: its candidate}, the result when one met
    the bound, else None). Option ``must`` (the graph-order fallback's base) is scored even past the options' share
    of the budget, while the whole budget allows it."""
    report = s.report
    results: dict[int, Candidate] = {}  # option index -> its candidate (skipped options have none)
    for i, (label, build) in enumerate(options):
        if i > 0 and not s.can_afford(share=1.0 if i == must else OPTIONS_SHARE):
            if must is None or i >= must:
                break
            continue
        why = getattr(build, "skip_when", lambda _: None)({results[j].label: results[j] for j in results})
        if why:  # an option made pointless by the ones scored before it (e.g. bias correction on the worse preset)
            report.setdefault("options_skipped", []).append({"what": label, "why": why})
            continue
        try:
            c = s.evaluate(label, build)
        except (GateFailedError, UsageError):
            raise
        except EdgeoptError as err:  # the quantizer crashing on one option drops that option, not the search
            if i == len(options) - 1 and not results:
                raise
            report.setdefault("options_skipped", []).append({"what": label, "why": f"failed: {err.message}"})
            continue
        results[i] = c
        if c.met:
            report["quantizer_options"] = {"chosen": label}
            return results, _finish(s, c, c, [])
    return results, None


def _ranked_fallback(s: BudgetedSearch, results: dict[int, Candidate], order: list[int], rank, with_float,
                     sensitivity_method, quantizes, fallback_bases: int, closest: Candidate) -> SearchResult:
    """The per-op float fallback by sensitivity (module doc, 2.) on the options in ``order`` (the option closest to
    the bound first, or the graph-order fallback's), the next ones while time is left."""
    report = s.report
    base_i = order[0]
    base = results[base_i]
    ranked: list[tuple[str, float]] = []
    if rank is None or with_float is None or not s.can_afford():
        return _finish(s, None, closest, ranked)
    s._show(f"ranking ops by sensitivity on {base.label}")
    t = time.perf_counter()
    # the ranking may use the budget but must leave room for two candidates (ops past it stay unranked)
    deadline = s.t0 + s.budget_s - 2 * (float(np.mean(s.costs)) if s.costs else 0.0)
    ranked = rank(base.artifact, deadline)
    unranked = sum(1 for _, e in ranked if e == UNRANKED)
    report["sensitivity"] = {"method": sensitivity_method, "rank_calls": 1, "nodes": len(ranked),
                             "unranked_for_time": unranked,
                             "seconds": round(time.perf_counter() - t, 2),
                             "top": [{"node": n, "error": round(float(e), 6)} for n, e in ranked[:10]]}
    if not ranked:
        return _finish(s, None, closest, ranked)
    hit, fp32_only = None, False
    for j in order[:fallback_bases]:
        if hit is not None or (j != base_i and not s.can_afford()):
            break
        if j != base_i:  # the ops keep their names across the options: the ranking is reused, not redone
            report["quantizer_options"].setdefault("float_fallback_also_on", []).append(results[j].label)
        hit, only, closest = _float_fallback(s, ranked, j, results[j], with_float, quantizes, closest)
        fp32_only = fp32_only or only
        if hit is not None:
            report["quantizer_options"]["chosen"] = results[j].label
    if hit is None and fp32_only:
        report["only_all_float_meets"] = True  # only with every quantized op in float: the FP32 model
    return _finish(s, hit, closest, ranked)


def _float_fallback(s: BudgetedSearch, ranked, base_i: int, base: Candidate, with_float, quantizes,
                    closest: Candidate) -> tuple[Candidate | None, bool, Candidate]:
    """The k most sensitive ops of option ``base_i`` in float, k grown 1, 2, 4, … then bisected (module doc):
    (the smallest hit that still quantizes, or None; whether only the FP32 model met the bound; the closest)."""
    n = len(ranked)
    k_all_float: dict[int, bool] = {}  # k whose candidate quantized no compute op (more in float can't): met?

    def attempt(k: int) -> Candidate:
        nonlocal closest
        kept = tuple(name for name, _ in ranked[:k])
        c = s.evaluate(f"{base.label} + {k} most sensitive op(s) in float", with_float(base_i, kept), kept)
        if k < n and quantizes is not None and not quantizes(c.artifact):
            s.tried[-1]["quantized_compute_ops"] = 0
            k_all_float[k] = c.met
            c.met = False  # a hit only as the FP32 model is: it bounds the bisection, it is no INT8 result
            return c
        if k < n and (c.search_value > closest.search_value or (c.met and not closest.met)):
            closest = c  # every op in float is the FP32 model: never the "closest INT8" a failure names
        return c

    lo, hit = 0, None  # lo: largest k known to miss; hit: smallest k known to meet
    k = 1
    while k <= n and s.can_afford():
        c = attempt(k)
        if c.met or k_all_float:
            hit = c if c.met else None
            break
        lo = k
        if k == n:
            break
        k = min(n, k * 2)

    def upper() -> int:  # the smallest k known to meet, or to leave no compute op quantized
        return min(([len(hit.kept)] if hit is not None else []) + list(k_all_float))

    while (hit is not None or k_all_float) and upper() - lo > 1 and s.can_afford():
        mid = (lo + upper()) // 2
        c = attempt(mid)
        if c.met:
            hit = c
        elif mid not in k_all_float:
            lo = mid
    if hit is not None and len(hit.kept) >= n:
        return None, True, closest
    return hit, any(k_all_float.values()), closest


def _prefix_fallback(s: BudgetedSearch, fp: FloatPrefix, base_i: int, base: Candidate, with_float, quantizes,
                     closest: Candidate) -> tuple[Candidate | None, Candidate]:
    """The first k of the base option's weighted ops (graph order) in float, k bisected between 0 (the option
    missed) and all of them (FP32) (module doc, 2.): (the smallest hit that still quantizes, or None; the closest)."""
    names = list(fp.ops(base.artifact))
    n = len(names)
    s.report["float_prefix"] = entry = {"base": base.label, "weighted_ops": n, "tried": []}

    def attempt(k: int) -> Candidate:
        nonlocal closest
        kept = tuple(names[:k])
        c = s.evaluate(f"{base.label} + first {k} of {n} weighted op(s) in float (graph order)",
                       with_float(base_i, kept), kept)
        entry["tried"].append(k)
        if quantizes is not None and not quantizes(c.artifact):
            s.tried[-1]["quantized_compute_ops"] = 0
            c.met = False  # the FP32 model is no INT8 result
        elif c.search_value > closest.search_value or (c.met and not closest.met):
            closest = c
        return c

    lo, hi, hit = 0, n, None  # lo: known to miss; hi: known to meet (n: every op in float, the FP32 model)
    while hi - lo > 1 and s.can_afford():
        mid = (lo + hi) // 2
        c = attempt(mid)
        if c.met:
            hit, hi = c, mid
        else:
            lo = mid
    entry["hit"] = None if hit is None else len(hit.kept)
    return hit, closest


def confirmed(s: BudgetedSearch, c: Candidate, counted: bool = True) -> bool:
    """The search's choice ``c`` confirmed once on the held-back part (:meth:`BudgetedSearch.confirm_choice`), its
    figures added to its row of ``tried``; why not in the report's ``not_confirmed``."""
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


def _finish(s: BudgetedSearch, best: Candidate | None, closest: Candidate, ranked) -> SearchResult:
    if best is not None and not confirmed(s, best):
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
    most = max((t.get("kept_in_float", 0) for t in r.get("tried", ())), default=0)
    if most > len(c.kept):  # the best was not the one with most ops in float: say what else was tried
        kept += f"; candidates with up to {most} ops in float were tried and scored lower"
    if r.get("only_all_float_meets"):
        kept += "; only with every op in float (the FP32 model) was the bound met"
    if r.get("not_confirmed"):
        kept += f"; the search's choice was not confirmed on the held-back part ({r['not_confirmed']})"
    budget_hint = "raise --search-budget, " if r.get("stopped_by_budget") else ""  # only when the budget stopped it
    return GateFailedError(
        f"{prefix}: INT8 misses --max-accuracy-drop {bound:g} {where}: best {r['metric']} "
        f"{c.search_value:.2f}{unit} vs FP32 {r['fp32']['search']:.2f}{unit} on the search part "
        f"(drop {r['fp32']['search'] - c.search_value:.2f}){held}, with {kept}",
        f"{budget_hint}relax --max-accuracy-drop, or keep FP32 (--precision fp32)", details=r)
