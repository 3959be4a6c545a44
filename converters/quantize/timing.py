"""The quick timing of convert's speed checks, on ``edgeopt bench``'s clock, and the INT8 speed verdict.

Every in-run speed figure (the INT8 search's verdict, the mode searches, ``--backend auto``, prune's check) is
timed by :func:`quick_latency_ms`, which calls bench's own measuring function
(:func:`edgeopt.runtime.measure.measure_interleaved`) with bench's warm-up and block length (``WARMUP``,
``BLOCK_SECONDS``, the defaults of :class:`edgeopt.bench.api.BenchOptions`): each run is warmed up, then timed in
blocks of back-to-back calls, the blocks taking turns. One run's leftovers (ONNX Runtime's spinning pool threads, OpenVINO's streams, OpenMP, a
cache another run filled) fall on the first call of the next block, not on every call of another runtime as with
call-by-call alternation, and the p50 drops them. Only the length differs from a benchmark: about ``target_s``
of timed calls in all (the quick target), at least ``min_runs`` calls each. What convert prints as a speed-up is
measured again on the written artifact (:mod:`edgeopt.speed_claim`).
"""

from __future__ import annotations

from collections.abc import Callable

from edgeopt.errors import GateFailedError

QUICK_S = 1.5  # the speed check's quick timing: about this many seconds of timed calls in all
MIN_BLOCKS = 3  # each run gets at least this many blocks, so the runs take turns even on a short target


def quick_latency_ms(runs: dict[str, Callable], feed: dict, *, min_runs: int = 20,
                     target_s: float | None = QUICK_S) -> dict[str, float]:
    """The p50 (ms) of each run on ``feed``, measured the way ``edgeopt bench`` measures artifacts side by side
    (its warm-up, its blocks taking turns: :func:`edgeopt.runtime.measure.measure_interleaved`), for about
    ``target_s`` of timed calls in all (None: ``min_runs`` calls each). A quick estimate, not a benchmark."""
    from edgeopt.runtime.measure import BLOCK_SECONDS, WARMUP, measure_interleaved

    each_s = 0.0 if target_s is None else target_s / max(len(runs), 1)
    block_s = min(BLOCK_SECONDS, each_s / MIN_BLOCKS) if each_s > 0 else BLOCK_SECONDS
    measured = measure_interleaved([lambda r=r: r(feed) for r in runs.values()], warmup=WARMUP,
                                   min_runs=min_runs, min_seconds=each_s, block_seconds=max(block_s, 1e-3))
    return {k: round(float(m["latency_ms"]["p50"]), 4) for k, m in zip(runs, measured, strict=True)}


def interleaved_latency_ms(runs: dict[str, Callable], feed: dict, repeats: int = 20,
                           target_s: float | None = None) -> dict:
    """:func:`quick_latency_ms` with at least ``repeats`` calls of each run (about ``target_s`` in all when given)."""
    return quick_latency_ms(runs, feed, min_runs=repeats, target_s=target_s)


def blocked_latency_ms(runs: dict[str, Callable], feed: dict, *, calls: int = 20, rounds: int = 5,
                       target_s: float | None = QUICK_S) -> dict:
    """:func:`quick_latency_ms` with at least ``calls`` x ``rounds`` calls of each run (about ``target_s`` in all)."""
    return quick_latency_ms(runs, feed, min_runs=calls * rounds, target_s=target_s)


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
    """Compare the searched INT8 result with FP32 (``latency`` from :func:`quick_latency_ms`):
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
