"""Is this machine quiet enough to benchmark on? Each core's speed, probed over time.

A fixed integer loop is timed on each core in turn (the thread pinned there) every ``--interval``
seconds. On a quiet machine every probe takes the same time; on a shared VM a core can run much
slower for seconds at a time with no other process in the guest and no steal time reported (its
hyperthread sibling or the host is busy), which makes multi-threaded medians bimodal. Prints one
JSON object: per-core probe times, and the share of probes slower than 1.3x the 10th percentile.

    .venv/bin/python bench/machine_noise.py [--seconds 30] [--interval 0.5]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

SLOW = 1.3


def _spin(n: int) -> int:
    x = 0
    for i in range(n):
        x += i
    return x


def probe(seconds: float = 30.0, interval: float = 0.5, work: int = 200_000) -> dict:
    cores = sorted(os.sched_getaffinity(0))
    times: dict[int, list[float]] = {c: [] for c in cores}
    t_end = time.monotonic() + seconds
    try:
        while time.monotonic() < t_end:
            for c in cores:
                os.sched_setaffinity(0, {c})
                _spin(work // 20)  # settle on the core
                t0 = time.perf_counter()
                _spin(work)
                times[c].append((time.perf_counter() - t0) * 1e3)
            time.sleep(interval)
    finally:
        os.sched_setaffinity(0, set(cores))
    ordered = sorted(x for v in times.values() for x in v)
    fastest = ordered[len(ordered) // 10]  # the 10th percentile: a robust "undisturbed" speed
    per_core = {}
    for c, v in times.items():
        slow = [x for x in v if x > SLOW * fastest]
        per_core[str(c)] = {"probes": len(v), "median_ms": round(sorted(v)[len(v) // 2], 3),
                            "max_ms": round(max(v), 3), "slow_share": round(len(slow) / len(v), 3)}
    all_probes = [x for v in times.values() for x in v]
    slow_share = sum(x > SLOW * fastest for x in all_probes) / len(all_probes)
    return {"cores": per_core, "p10_ms": round(fastest, 3), "slow_threshold": f">{SLOW}x the 10th-percentile probe",
            "slow_share": round(slow_share, 3), "quiet": slow_share < 0.02}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--interval", type=float, default=0.5)
    args = ap.parse_args()
    out = {"seconds": args.seconds, "interval_s": args.interval, "load_before": list(os.getloadavg()),
           **probe(args.seconds, args.interval), "load_after": list(os.getloadavg())}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
