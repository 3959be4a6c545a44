"""What a unit kept in float costs, and a hit of OpenVINO's float fallback made cheaper.

The float fallback (:mod:`.search`) keeps the units that most reduce the output error in float, blind to what
each costs: on magika the first was the Conv's input quantizer (the Conv is ~90 % of the model's multiply-adds),
and the hit, within the bound, ran no faster than FP32. Once a hit is found, each unit it keeps in float, most
expensive first, is tried quantized again with cheaper units (next in the ranking, together costing less) in float
instead; a candidate that meets the bound on both parts replaces the hit. The cost is an estimate, said so in the
report: the multiply-accumulates of the unit's weighted ops at the model's static shapes (its weights' size where
a shape is dynamic).
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np

from edgeopt.converters.quantize.candidate import Candidate, SearchResult

COST = ("multiply-accumulates of the unit's weighted ops (Convolution, MatMul, ...) at the model's static shapes, "
        "its weights' size where a shape is dynamic: an estimate of what keeping it float costs")
CHANNEL_FIRST = ("Convolution", "GroupConvolution", "ConvolutionBackpropData", "GroupConvolutionBackpropData")


def op_macs(op) -> float:
    """Multiply-accumulates of one weighted op: output elements x its weights' elements per output channel."""
    shapes = [i.get_source_output().get_partial_shape() for i in op.inputs()
              if i.get_source_output().get_node().get_type_name() == "Constant"]
    weights = [s for s in shapes if s.is_static and len(s) >= 2]
    if not weights:
        return 0.0
    w = [int(d.get_length()) for d in weights[0]]
    out = op.get_output_partial_shape(0)
    if not out.is_static or len(out) < 2:
        return float(np.prod(w))
    o = [int(d.get_length()) for d in out]
    channels = o[1] if op.get_type_name() in CHANNEL_FIRST else o[-1]
    return float(np.prod(o)) * float(np.prod(w)) / max(channels, 1)


def unit_costs(units, names) -> dict[str, float]:
    """Each unit's cost (:data:`COST`), read on the FP32 model's ops of the same names (its weights are Constants)."""
    from .quantizer import WEIGHT_OPS

    out = {}
    for fq in names:
        ops = [units.fp32_ops.get(r) for r in units.readers(fq)]
        out[fq] = sum(op_macs(op) for op in ops if op is not None and op.get_type_name() in WEIGHT_OPS)
    return out


def swap_plan(kept: tuple[str, ...], ranked: list[str], cost: dict[str, float], u: str) -> tuple[str, ...] | None:
    """``kept`` with unit ``u`` quantized again and, in float instead, the units not kept that cost less than ``u``
    (in ranking order, while together they cost less than ``u``); None when there are none."""
    extra, total = [], 0.0
    for name in ranked:
        if name in kept or cost.get(name, 0.0) >= cost[u] or total + cost.get(name, 0.0) >= cost[u]:
            continue
        extra.append(name)
        total += cost.get(name, 0.0)
    if not extra:
        return None
    return tuple(k for k in kept if k != u) + tuple(extra)


def cheaper_float(result: SearchResult, units, bypassed: Callable, quantizes: Callable, search, confirm,
                  bound: float) -> None:
    """Make ``result``'s hit cheaper where a swap (:func:`swap_plan`) meets the bound on both parts, within what is
    left of the budget; what was tried goes in ``report['cheaper_float']``."""
    r, hit = result.report, result.best
    ranked = [name for name, _ in result.ranked]
    cost = unit_costs(units, ranked)
    step = [t["seconds"] for t in r["tried"] if t["kept_in_float"]] or [t["seconds"] for t in r["tried"]]
    tried: list[dict] = []
    r["cheaper_float"] = {"cost": COST, "kept_cost": sum(cost.get(k, 0.0) for k in hit.kept), "tried": tried}
    for u in sorted(hit.kept, key=lambda k: -cost.get(k, 0.0)):
        plan = swap_plan(hit.kept, ranked, cost, u) if cost.get(u, 0.0) > 0 else None
        if plan is None or r["budget_s"] - r["search_seconds"] < float(np.mean(step)):
            continue
        t = time.perf_counter()
        q, run = bypassed(plan)()
        s_val = result.m_search.score(run, search)
        entry = {"quantized_again": u, "float_instead": [k for k in plan if k not in hit.kept],
                 "search_drop_points": round(result.m_search.fp32_value - s_val, 3)}
        c_val = result.m_confirm.score(run, confirm) if entry["search_drop_points"] <= bound else None
        if c_val is not None:
            entry["confirm_drop_points"] = round(result.m_confirm.fp32_value - c_val, 3)
        r["search_seconds"] = round(r["search_seconds"] + time.perf_counter() - t, 2)
        tried.append(entry)
        if c_val is None or entry["confirm_drop_points"] > bound or not quantizes(q):
            continue
        label = f"{result.best.label.split(' + ')[0]} + {len(plan)} op(s) in float (cheaper swap)"
        hit = Candidate(label, plan, s_val, c_val, artifact=q, met=True)
        entry["kept"] = True
    if hit is not result.best:
        result.best = hit
        r.update(chosen=hit.label, kept_in_float_count=len(hit.kept), search_value=round(hit.search_value, 4),
                 search_drop_points=round(result.m_search.fp32_value - hit.search_value, 3),
                 confirm_value=round(hit.confirm_value, 4),
                 confirm_drop_points=round(result.m_confirm.fp32_value - hit.confirm_value, 3))
    r["cheaper_float"]["final_cost"] = sum(cost.get(k, 0.0) for k in hit.kept)
