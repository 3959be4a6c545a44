"""The quick timing of convert's speed checks, on ``edgeopt bench``'s clock.

Every in-run speed figure (the INT8 searches' speed verdict, the mode searches, ``--backend auto``, prune's check)
is timed by :func:`quick_latency_ms`, which calls bench's own measuring function (:func:`.measure.measure_interleaved`)
with bench's warm-up and block length (``WARMUP``, ``BLOCK_SECONDS``, the defaults of
:class:`edgeopt.bench.api.BenchOptions`): each run is warmed up, then timed in blocks of back-to-back calls, the
blocks taking turns. One run's leftovers (a runtime's spinning pool threads, its streams, OpenMP, a cache another run
filled) fall on the first call of the next block, not on every call of another runtime as with call-by-call
alternation, and the p50 drops them. Only the length differs from a benchmark: about ``target_s`` of timed calls in
all (the quick target), at least ``min_runs`` calls each. What convert prints as a speed-up is measured again on the
written artifact (``edgeopt/speed_claim.py``). Standard library only at import, like the rest of this package.
"""

from __future__ import annotations

from collections.abc import Callable

QUICK_S = 1.5  # the speed check's quick timing: about this many seconds of timed calls in all
MIN_BLOCKS = 3  # each run gets at least this many blocks, so the runs take turns even on a short target


def quick_latency_ms(runs: dict[str, Callable], feed: dict, *, min_runs: int = 20,
                     target_s: float | None = QUICK_S) -> dict[str, float]:
    """The p50 (ms) of each run on ``feed``, measured the way ``edgeopt bench`` measures artifacts side by side
    (its warm-up, its blocks taking turns: :func:`edgeopt.runtime.measure.measure_interleaved`), for about
    ``target_s`` of timed calls in all (None: ``min_runs`` calls each). A quick estimate, not a benchmark."""
    from .measure import BLOCK_SECONDS, WARMUP, measure_interleaved

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
