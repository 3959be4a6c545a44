"""The budgeted accuracy-aware INT8 search every quantizing backend shares.

1. The quantizer's own options, in the order given (the preset first; for a model with several outputs the heads
   option right after it, :func:`with_heads_option`, in every backend's search alike): the first one that keeps the
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
   is within the bound. Each choice of the search is then confirmed on the held-back part, never seen by the
   search (:func:`.verdict.confirmed`, :meth:`.budget.BudgetedSearch.confirm_choice`; the mode search of
   :mod:`.bound` too): the upper limit there within the bound, and on all the eval samples, the convert gate's own judgement
   (:func:`edgeopt.validation_model.within_bound`). A choice not confirmed is a miss: the search goes on (the next
   option, the float fallback with more ops in float than the choice kept), and each further look at the held-back
   part (another choice, a rebuilt hit, a hit at another precision hint) is at a smaller risk
   (:func:`edgeopt.metrics.confidence.look_confidence`), so all looks together keep the confidence. Only the
   search's choices are looked at there, never each candidate, so the looks stay few. A point
   estimate on few samples is not enough: a CTC recogniser's searches picked among many candidates on 50 lines,
   confirmed on 50 others, and lost 3.5 and 6.5 points of exact match on unseen lines with a 2-point bound.
   A held-back part too small to confirm even a candidate that changes no sample is refused before any work,
   naming the eval size needed (:func:`edgeopt.validation_model.eval_too_small`, exit 5). A user's metric without
   per-sample scores is judged by its point drops and on 9 of 10 random halves of all the eval samples
   (:func:`.lazy_halves.half_metrics`). The metric's kind is chosen once, on the whole eval set as the gate chooses it, and
   judges both parts the same way.

A time budget bounds the whole search: a candidate is not started when the time already spent plus
what a candidate has cost so far would pass it (the first option always runs, so there is always a
figure to report). The options may use half of it, so the float fallback always gets its turn; the
ranking stops early enough to leave room for two candidates (ops it had no time for rank last). Out of budget or out of candidates, :class:`GateFailedError` (exit 5) names the
best metric reached and how much was kept in float; nothing is written. A hit with every op in float is the
FP32 model, not an INT8 result: it bounds the bisection but is a gate failure too (the message says so).

This module runs the options (1.) and hands over to :mod:`.fallback` (2.); :mod:`.budget` judges each candidate
within the time budget (3.), on the parts of :mod:`.eval_parts`; :mod:`.verdict` confirms the choice and names a
failure.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from edgeopt.errors import EdgeoptError, GateFailedError, UsageError
from edgeopt.metrics.confidence import DEFAULT_CONFIDENCE

from .budget import BudgetedSearch
from .candidate import Build, Candidate, Rank, SearchResult
from .fallback import FloatPrefix, prefix_fallback, ranked_fallback
from .heads import HeadsOption
from .verdict import confirmed, finish

OPTIONS_SHARE = 0.5  # the quantizer's options may use half the budget; the float fallback gets the rest


def with_heads_option(options: list[tuple[str, Any]], heads: HeadsOption | None,
                      make: Callable[[HeadsOption], Any]) -> list[tuple[str, Any]]:
    """``options`` with ``make(heads)``, labelled ``heads.label()``, right after the first (the preset) when the model
    has output heads (:mod:`.heads`); else unchanged. Every backend's search puts it at the same place, so a
    detector's scores are tried with their heads in float before any other calibration or placement."""
    if heads is None or not heads.heads:
        return list(options)
    return [*options[:1], (heads.label(), make(heads)), *options[1:]]


def run_search(*, options: list[tuple[str, Build]], rank: Rank | None,
               with_float: Callable[[int, tuple[str, ...]], Build] | None, fp32_run, search, confirm,
               bound: float, budget_s: float, progress=None, what: str = "INT8 search",
               sensitivity_method: str = "", metric_spec=None, search_path=(),
               quantizes: Callable[[Any], bool] | None = None, fallback_bases: int = 1, whole=None,
               float_prefix: FloatPrefix | None = None, confidence: float = DEFAULT_CONFIDENCE,
               looks=None) -> SearchResult:
    """The search described in the module doc. ``with_float(option_index, kept)`` returns the build of
    option ``option_index`` with the ``kept`` op names in float. ``quantizes(artifact)``: whether a candidate still
    holds a quantized compute op; one that meets the bound without any is the FP32 model, like the candidate with
    every ranked op in float (the ranking may hold ops without weights, so fewer than all of them can leave none).
    ``fallback_bases``: on how many options, best first, the float fallback may run (while time is left) with the one
    ranking; more than 1 only where the ranked ops keep their names across the options (ONNX Runtime's nodes).
    ``whole``: the eval data as given, on which the metric's kind is chosen (:func:`.eval_parts.part_metrics`).
    ``float_prefix``: the graph-order float fallback tried first, on its own option (module doc, 2.).
    ``looks``: the run's :class:`edgeopt.metrics.confidence.Looks` at the held-back part (None: this search's own)."""
    s = BudgetedSearch(fp32_run=fp32_run, search=search, confirm=confirm, bound=bound, budget_s=budget_s,
                       progress=progress, what=what, metric_spec=metric_spec, search_path=search_path, whole=whole,
                       confidence=confidence, looks=looks)
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
        hit, closest = prefix_fallback(s, float_prefix, base_i, base, with_float, quantizes, closest)
        if hit is not None and confirmed(s, hit):
            return finish(s, hit, closest, [])
    return ranked_fallback(s, results, order, rank, with_float, sensitivity_method, quantizes, fallback_bases,
                            closest)


def _options(s: BudgetedSearch, options, must: int | None = None) -> tuple[dict[int, Candidate], SearchResult | None]:
    """The quantizer's options in order (module doc, 1.): ({option index: its candidate}, the result when one met
    the bound, else None). Option ``must`` (the graph-order fallback's base) is scored even past the options' share
    of the budget, while the whole budget allows it."""
    report = s.report
    results: dict[int, Candidate] = {}  # option index -> its candidate (skipped options have none)
    for i, (label, build) in enumerate(options):
        if i > 0 and not s.can_afford(share=1.0 if i == must else OPTIONS_SHARE):
            last = must is None or i >= must
            passed = [lb for lb, _ in options[i:]] if last else [label]
            report.setdefault("options_skipped", []).extend(
                {"what": lb, "why": "not scored: the options' share of --search-budget was spent"} for lb in passed)
            if last:
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
        if c.met and confirmed(s, c):
            report["quantizer_options"] = {"chosen": label}
            return results, finish(s, c, c, [])
        # not confirmed: a miss; the next options and the float fallback go on, their looks at a stricter confidence
        if c.confirm_value is not None and not s.can_look():
            report["quantizer_options"] = {"chosen": label}
            return results, finish(s, None, c, [])  # no further look could confirm anything
    return results, None
