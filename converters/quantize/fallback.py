"""Per-op float fallback of the INT8 search (module doc of :mod:`.strategy`, 2.): a graph-order prefix of weighted
ops in float, bisected from half of them, then the most sensitive ops in float, their number grown 1, 2, 4, ... and
bisected."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .budget import BudgetedSearch
from .candidate import Candidate, SearchResult
from .sensitivity import UNRANKED
from .verdict import confirmed, finish


@dataclass(frozen=True)
class FloatPrefix:
    """Float fallback by graph order (module doc): the best scored of options ``bases`` (their indices in the
    options; the first is always scored) with the first ``k`` of ``ops(artifact)`` (its quantized weighted ops, in
    graph order) in float, ``k`` bisected from half of them."""
    bases: tuple[int, ...]
    ops: Callable[[Any], list[str]]

    def base(self, results: dict) -> int | None:
        """The option the prefixes start from: the best scored of ``bases`` (None: none was scored)."""
        scored = [i for i in self.bases if i in results]
        return max(scored, key=lambda i: results[i].search_value) if scored else None


def ranked_fallback(s: BudgetedSearch, results: dict[int, Candidate], order: list[int], rank, with_float,
                     sensitivity_method, quantizes, fallback_bases: int, closest: Candidate) -> SearchResult:
    """The per-op float fallback by sensitivity (module doc) on the options in ``order`` (the option closest to
    the bound first, or the graph-order fallback's), the next ones while time is left."""
    report = s.report
    base_i = order[0]
    base = results[base_i]
    ranked: list[tuple[str, float]] = []
    if rank is None or with_float is None or not s.can_afford() or not s.can_look():
        return finish(s, None, closest, ranked)
    s.show(f"ranking ops by sensitivity on {base.label}")
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
        return finish(s, None, closest, ranked)
    hit, fp32_only = None, False
    for j in order[:fallback_bases]:
        if hit is not None or (j != base_i and not s.can_afford()):
            break
        if j != base_i:  # the ops keep their names across the options: the ranking is reused, not redone
            report["quantizer_options"].setdefault("float_fallback_also_on", []).append(results[j].label)
        lo = 0  # the most ops in float known to miss (on the search part, or a choice not confirmed)
        while True:
            hit, only, closest = _float_fallback(s, ranked, j, results[j], with_float, quantizes, closest, lo)
            fp32_only = fp32_only or only
            if hit is None or confirmed(s, hit):
                break
            lo, hit = len(hit.kept), None  # not confirmed held back: more ops in float, looked at more strictly
            if not s.can_look():  # no further look could confirm anything
                break
        if hit is not None:
            report["quantizer_options"]["chosen"] = results[j].label
    if hit is None and fp32_only:
        report["only_all_float_meets"] = True  # only with every quantized op in float: the FP32 model
    return finish(s, hit, closest, ranked)


def _float_fallback(s: BudgetedSearch, ranked, base_i: int, base: Candidate, with_float, quantizes,
                    closest: Candidate, lo: int = 0) -> tuple[Candidate | None, bool, Candidate]:
    """The k most sensitive ops of option ``base_i`` in float, k grown 1, 2, 4, … (from twice ``lo``, the most
    known to miss) then bisected (module doc): (the smallest hit on the search part that still quantizes, or None;
    whether only the FP32 model met the bound; the closest)."""
    n = len(ranked)
    k_all_float: dict[int, bool] = {}  # k whose candidate quantized no compute op (more in float can't): met?

    def attempt(k: int) -> Candidate:
        nonlocal closest
        kept = tuple(name for name, _ in ranked[:k])
        c = s.evaluate_or_miss(f"{base.label} + {k} most sensitive op(s) in float", with_float(base_i, kept), kept)
        if c.not_built:  # a miss
            return c
        if k < n and quantizes is not None and not quantizes(c.artifact):
            s.tried[-1]["quantized_compute_ops"] = 0
            k_all_float[k] = c.met
            c.met = False  # a hit only as the FP32 model is: it bounds the bisection, it is no INT8 result
            return c
        if k < n and (c.search_value > closest.search_value or (c.met and not closest.met)):
            closest = c  # every op in float is the FP32 model: never the "closest INT8" a failure names
        return c

    hit = None  # lo: largest k known to miss; hit: smallest k known to meet
    k = min(n, max(1, 2 * lo))
    while lo < n and k <= n and s.can_afford():
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


def prefix_fallback(s: BudgetedSearch, fp: FloatPrefix, base_i: int, base: Candidate, with_float, quantizes,
                     closest: Candidate) -> tuple[Candidate | None, Candidate]:
    """The first k of the base option's weighted ops (graph order) in float, k bisected between 0 (the option
    missed) and all of them (FP32) (module doc): (the smallest hit that still quantizes, or None; the closest)."""
    names = list(fp.ops(base.artifact))
    n = len(names)
    s.report["float_prefix"] = entry = {"base": base.label, "weighted_ops": n, "tried": []}

    def attempt(k: int) -> Candidate:
        nonlocal closest
        kept = tuple(names[:k])
        c = s.evaluate_or_miss(f"{base.label} + first {k} of {n} weighted op(s) in float (graph order)",
                               with_float(base_i, kept), kept)
        entry["tried"].append(k)
        if c.not_built:  # a miss
            return c
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
