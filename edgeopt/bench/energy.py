"""Energy per inference and cost per 1,000 queries: measured where a power meter was read,
otherwise estimated from the profile's TDP x CPU utilisation, and labelled "estimated"."""

from __future__ import annotations

J_PER_KWH = 3.6e6
DEFAULT_PRICE_PER_KWH = 0.30


def energy_figures(result: dict, *, tdp_w: float | None, price_per_kwh: float = DEFAULT_PRICE_PER_KWH) -> dict:
    """``{"source": measured|estimated|unavailable, "joules_per_inference", "cost_per_1k_queries", ...}``."""
    measured = result.get("energy") or {}
    if measured.get("source") == "measured" and measured.get("joules_per_inference") is not None:
        j = float(measured["joules_per_inference"])
        out = {"source": "measured", "meter": measured.get("meter"), "joules_per_inference": j,
               "avg_power_w": measured.get("avg_power_w"), "note": measured.get("note", "")}
    elif tdp_w:
        util = result.get("cpu_utilisation") or 1.0
        p50_s = result["latency_ms"]["p50"] / 1e3
        j = tdp_w * min(max(util, 0.0), 1.0) * p50_s
        out = {"source": "estimated", "joules_per_inference": j, "avg_power_w": tdp_w * util,
               "note": f"estimated: TDP {tdp_w:g} W x CPU utilisation {util:.2f} x median latency"}
    else:
        return {"source": "unavailable", "joules_per_inference": None, "cost_per_1k_queries": None,
                "note": "no power meter and no TDP"}
    out["price_per_kwh"] = price_per_kwh
    out["cost_per_1k_queries"] = j * 1000 / J_PER_KWH * price_per_kwh
    return out
