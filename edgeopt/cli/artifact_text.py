"""One-line texts about an artifact that both ``convert`` and ``inspect`` print (one wording each)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgeopt.validation_model import CheckedOn


def checked_on_text(on: CheckedOn) -> str:
    """Where the validation ran: the artifact's own provider, or which one instead and why."""
    where = on.provider if on.provider == on.target else (
        f"{on.provider}, not the artifact's {on.target}" + (f": {on.why}" if on.why else ""))
    return f"checked on {where}"


def precision_fallback_text(precision: str, fallback) -> str:
    """Why the artifact is not the precision asked for (``convert``'s float fallback, a ``PrecisionFallback``)."""
    return f"{precision.upper()}, not {fallback.requested.upper()}: no INT8 held the bound ({fallback.reason})"


def backend_search_text(row: dict, claim: dict | None = None) -> str:
    """One backend of ``--backend auto``: its speed vs ONNX Runtime FP32, chosen or dropped, and why; the chosen
    one's as measured on the written artifact (``claim``, the manifest's ``speed_claim``), the estimate beside it."""
    speed = (f"{row['latency_ms']:.3g} ms, x{row['speedup_vs_reference']:.2f} ONNX Runtime FP32, "
             if row.get("latency_ms") is not None else "")
    if claim and row.get("verdict") == "chosen":
        speed = (f"{claim['artifact_ms']:.3g} ms, x{claim['measured']:.2f} ONNX Runtime FP32 measured on the written "
                 f"artifact (search's estimate x{claim['estimate']:.2f}), ")
    return f"backend {row['backend']}: {speed}{row['verdict']} ({row['why']})"


def speed_claim_text(claim: dict) -> str:
    """The speed-up convert claims (the manifest's ``speed_claim``): measured on the written artifact by bench's
    measuring, the search's estimate beside it."""
    agree = "" if claim["agree"] else " (NOT within 10 %)"
    ups = claim.get("processes") or []
    median = (f", the median of {len(ups)} bench processes: " + ", ".join(f"x{u:g}" for u in ups)) if len(ups) > 1 else ""
    return (f"speed: x{claim['measured']:g} over FP32, measured on the written artifact ({claim['artifact_ms']:.3g} ms "
            f"vs {claim['reference_ms']:.3g} ms, p50 of {claim['runs']}+ runs each beside {claim['reference']}"
            f"{median}); the search's estimate x{claim['estimate']:g}{agree}"
            + (f"; edgeopt bench ARTIFACT {claim['reference_artifact']} repeats it" if claim.get("reference_artifact") else ""))


def mode_search_text(stage: str, search: dict) -> str:
    """A stage's INT8 mode search (``--quant-mode auto`` under a bound): each mode tried, chosen or dropped, and why."""
    rows = "; ".join(f"{r['mode']}: {r.get('verdict', '?')} ({r.get('why', '')})" for r in search.get("candidates", []))
    fallback = search.get("float_fallback")
    if fallback:  # the dynamic modes again, with their most sensitive ops in float
        rows += (f"; then {fallback.get('chosen', 'dynamic')} ({fallback.get('candidates', 0)} candidates): "
                 f"{fallback.get('verdict', '?')}")
    return f"{stage} modes: {rows}"


def consumer_check_text(check: dict) -> list[str]:
    """The consumer check (``manifest.consumer_check``): load.py vs the runner, the bare load, the plain default."""
    if check.get("skipped"):
        return [f"consumer check ({check['runtime']}): not run here: {check['skipped']}",
                *map(device_load_text, check.get("on_devices") or [])]

    def load_text(load: dict) -> str:
        applied = ", ".join(f"{k} {v}" for k, v in (load.get("applied") or {}).items() if k != "bare")
        return f"{load['how']}{f' [{applied}]' if applied else ''}: max |diff| vs the runner {load['max_abs_diff']:.3g}"

    lines = [f"consumer check ({check['runtime']}, {check['samples']} samples, "
             f"{'passed' if check.get('passed') else 'FAILED'}): " + load_text(check["with_settings"])]
    if check.get("bare"):
        lines.append("  without load.py: " + load_text(check["bare"]))
    missing = [s["name"] for s in check.get("settings") or [] if not s["plain_api_honours"] and s["value"] is not None]
    if missing:
        lines.append(f"  not carried by the model file (load.py/load.cc apply them): {', '.join(missing)}")
    pd = check.get("plain_default")
    if pd:
        holds = {True: "holds the bound", False: "MISSES the bound", None: "no bound given"}[pd.get("holds_bound")]
        lines.append(f"  judged at the plain default {pd['setting']}={pd['plain_default']} (not {pd['judged']}): "
                     f"{pd['metric']} {pd['metric_value']}, drop {pd['metric_drop']} on {pd['samples']} "
                     f"{pd['data_source']} samples ({holds})")
    return lines + [device_load_text(d) for d in check.get("on_devices") or []]


def device_load_text(load: dict) -> str:
    """One ``consumer_check.on_devices`` entry: load.py run on a --verify-on device."""
    if load.get("skipped"):
        return f"  on {load['where']}: not checked: {load['skipped']}"
    applied = ", ".join(f"{k} {v}" for k, v in (load.get("applied") or {}).items())
    return (f"  on {load['where']} ({load.get('runtime') or '?'}, {load['samples']} samples, "
            f"{'passed' if load.get('passed') else 'FAILED'}): {load['how']}{f' [{applied}]' if applied else ''}: "
            f"max |diff| vs the runner here {load['max_abs_diff']:.3g} (tolerance {load['tolerance']:.3g}: "
            f"{load.get('rule')})")
