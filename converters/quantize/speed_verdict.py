"""The INT8 speed verdict: the searched INT8 result against FP32 on the quick timing
(:mod:`edgeopt.runtime.quick_timing`), a warning when it is no faster, a faster float precision named, exit 5 under
``--min-speedup``."""

from __future__ import annotations

from edgeopt.errors import GateFailedError

FASTER_FLOAT = 1.2  # a float precision that holds the bound and is this much faster than the INT8 is named


def _faster_float(alternatives: dict | None, final: float) -> str | None:
    """The native float precisions (bf16 on AMX/AVX512-BF16) that hold the bound and run ``FASTER_FLOAT`` times
    faster than the INT8 result ``final`` (ms), said with what to type; None when there are none. A small
    recurrent model (g2p-en's GRU on an AMX CPU: OpenVINO bf16 x1.54 over ONNX Runtime FP32, its INT8 x1.12 at
    best) can be faster in bf16 than any INT8: ``--precision int8`` keeps 8 bits, and says so."""
    named = [f"{k} holds the bound and is x{final / v['latency_ms']:.2g} faster ({v['latency_ms']:.3g} ms vs "
             f"{final:.3g} ms, {v['drop']}; quick estimate): {v['suggest']}"
             for k, v in (alternatives or {}).items()
             if v.get("holds") and v.get("latency_ms") and final >= FASTER_FLOAT * v["latency_ms"]]
    return "; ".join(named) or None


def speed_verdict(latency: dict, *, final_key: str, runtime: str, min_speedup: float | None, ctx,
                  prefix: str, alternatives: dict | None = None, threads: int | None = None) -> dict:
    """Compare the searched INT8 result with FP32 (``latency`` from :func:`edgeopt.runtime.quick_timing.quick_latency_ms`):
    a warning when it is no faster, exit 5 under ``min_speedup``. Returns the report entry."""
    from edgeopt.host import cpu_facts

    fp32, final = latency["fp32"], latency[final_key]
    speedup = round(fp32 / final, 3) if final > 0 else None
    entry = {"latency_ms": latency, "speedup_vs_fp32": speedup, "runtime": runtime, "threads": threads,
             "note": "quick p50 on bench's clock on this machine before the artifact was written: an estimate; "
                     "convert measures the written artifact (speed_claim)",
             "machine": {k: v for k, v in cpu_facts().items() if k in ("model", "cores", "logical_cpus")}}
    faster = [f"{k} ({v['latency_ms']:.3g} ms, {v['drop']}{': ' + v['suggest'] if v.get('holds') else ''})"
              for k, v in (alternatives or {}).items()
              if v.get("latency_ms") is not None and v["latency_ms"] < final]
    if alternatives:
        entry["alternatives"] = alternatives
    if speedup is not None and speedup < 1.05:
        msg = (f"{prefix}: the INT8 result is no faster than FP32 here ({final:.3g} ms vs {fp32:.3g} ms, "
               f"x{speedup:g}; quick estimate before the artifact was written: on this machine's profile the "
               "speed-up convert prints is measured on the written artifact)")
        if faster:
            msg += "; faster: " + ", ".join(faster)
        else:
            msg += "; keeping FP32 (--precision fp32) costs nothing"
        entry["warning"] = msg
        if min_speedup is None:
            ctx.warn(msg)
    elif speedup is not None and (better := _faster_float(alternatives, final)):
        entry["faster_float"] = better
        ctx.warn(f"{prefix}: INT8 is x{speedup:g} over FP32, but " + better)
    if min_speedup is not None and (speedup is None or speedup < min_speedup):
        raise GateFailedError(f"{prefix}: INT8 speed-up x{speedup or 0:g} over FP32 is below --min-speedup {min_speedup:g} "
                              f"({final:.3g} ms vs {fp32:.3g} ms, quick estimate)"
                              + ("; faster: " + ", ".join(faster) if faster else ""),
                              "use --precision fp32 (or the faster precision named), or drop --min-speedup",
                              details=entry)
    return entry
