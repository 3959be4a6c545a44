"""Is ``edgeopt optimize``'s pick at least as fast as the best single backend picked by hand?

For each fixture model (digits and MNIST CNNs): run ``optimize`` on the ``host`` profile with a
1-point accuracy bound, then build the four hand-picked configurations (ONNX Runtime FP32/INT8,
OpenVINO FP32/INT8) through the same cache, validate them on the same labelled test split, and
measure the winner and the four side by side (interleaved, so they share the machine's noise).
Prints one JSON object: per model, every row's median and 95 % CI, the best manual pick within
the bound, and whether optimize's pick is at least as fast (``speedup_vs_best_manual`` >= 1, or
within the CIs). The machine's load is recorded: figures from a shared machine are noisy.

    .venv/bin/python bench/optimize_vs_manual.py [--models digits,mnist] [--bound 1] [--budget 10]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

MANUAL = [("onnxruntime fp32", "onnxruntime", "fp32"), ("onnxruntime int8", "onnxruntime", "int8"),
          ("openvino fp32", "openvino", "fp32"), ("openvino int8", "openvino", "int8")]
FINAL = {"warmup": 10, "min_runs": 200, "min_seconds": 2.0, "block_seconds": 0.2}


def _build(model, prof, calib, ev, backend, precision, bound):
    from edgeopt.model import graph_inputs, load_onnx
    from edgeopt.pipeline.cache import cached_convert
    from edgeopt.pipeline.recipe import Gates, Target
    from edgeopt.pipeline.run import plan_recipe

    shapes = {s.name: tuple(d if isinstance(d, int) and d > 0 else 1 for d in s.shape) for s in graph_inputs(load_onnx(model))}
    t = Target(name=f"{backend}-{precision}", profile=prof.name, backend=backend, precision=precision)
    with contextlib.redirect_stdout(sys.stderr):
        return cached_convert(model, prof, recipe=plan_recipe(t, Gates(max_accuracy_drop=bound)), calib=calib, eval=ev,
                              input_shapes=shapes).artifact


def _measure(rows: list[dict], ev: Path) -> None:
    from edgeopt.runtime.measure import feeds_from_npz, measure_interleaved, read_artifact
    from edgeopt.runtime.runners import open_runner

    runners = [open_runner(r["artifact"]) for r in rows]
    feeds = [feeds_from_npz(read_artifact(r["artifact"])["inputs"], str(ev)) for r in rows]
    try:
        res = measure_interleaved([lambda x=x, f=f: x.run(f) for x, f in zip(runners, feeds, strict=True)], **FINAL)
    finally:
        for x in runners:
            x.close()
    for r, m in zip(rows, res, strict=True):
        lat = m["latency_ms"]
        r.update(p50_ms=round(lat["p50"], 5), ci95_ms=[round(lat["ci95_low"], 5), round(lat["ci95_high"], 5)],
                 p90_ms=round(lat["p90"], 5), runs=m["runs"])


def one_model(name: str, bound: float, budget: float) -> dict:
    from edgeopt.artifact import load_artifact
    from edgeopt.optimize.optimizer import optimize
    from edgeopt.profiles import load_profile
    from fixtures import fixture_data, fixture_model

    model, calib, ev = fixture_model(f"{name}_cnn"), fixture_data(f"{name}_calib"), fixture_data(f"{name}_test")
    prof = load_profile("host")
    t0 = time.perf_counter()
    res = optimize(model, prof, max_accuracy_drop=bound, time_budget_min=budget, calib=calib, eval=ev,
                   on_event=lambda m: print(m, file=sys.stderr))
    opt_s = round(time.perf_counter() - t0, 1)
    if res.winner is None:
        return {"model": name, "error": "optimize found no candidate within the bound"}
    rows = [{"name": f"optimize: {res.winner.label}", "artifact": res.winner.artifact, "optimize": True,
             "accuracy_drop": res.winner.accuracy_drop}]
    for label, backend, precision in MANUAL:
        try:
            art = _build(model, prof, calib, ev, backend, precision, bound)
        except Exception as err:  # noqa: BLE001 - a row that can't be built says why
            rows.append({"name": label, "error": str(err)[:200]})
            continue
        v = load_artifact(art).validation or {}
        rows.append({"name": label, "artifact": str(art), "accuracy_drop": v.get("accuracy_drop")})
    measured = [r for r in rows if r.get("artifact")]
    _measure(measured, ev)
    for r in rows:
        r["within_bound"] = r.get("accuracy_drop") is not None and r["accuracy_drop"] <= bound
        r.pop("artifact", None)
    manual = [r for r in rows if not r.get("optimize") and r.get("p50_ms") and r["within_bound"]]
    best = min(manual, key=lambda r: r["p50_ms"]) if manual else None
    pick = rows[0]
    speedup = round(best["p50_ms"] / pick["p50_ms"], 3) if best else None
    overlap = bool(best) and pick["ci95_ms"][0] <= best["ci95_ms"][1]
    return {"model": f"{name}_cnn", "rows": rows, "best_manual": best["name"] if best else None,
            "optimize_pick": pick["name"], "speedup_vs_best_manual": speedup,
            "at_least_as_fast": bool(best) and (speedup >= 1.0 or overlap),
            "optimize_seconds": opt_s, "optimize_skipped": res.skipped,
            "search_candidates": [{"label": c.label, "p50_ms": c.p50_ms, "accuracy_drop": c.accuracy_drop,
                                   "feasible": c.feasible, "error": c.error} for c in res.candidates]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="digits,mnist")
    ap.add_argument("--bound", type=float, default=1.0)
    ap.add_argument("--budget", type=float, default=10.0, help="optimize's time budget, minutes")
    args = ap.parse_args()
    os.environ.setdefault("EDGEOPT_CACHE_DIR", tempfile.mkdtemp(prefix="edgeopt-bench-cache-"))
    from edgeopt.converters.registry import distributions
    from edgeopt.runtime import environment

    env = environment.collect("local", libraries=distributions())
    out = [one_model(m.strip(), args.bound, args.budget) for m in args.models.split(",") if m.strip()]
    environment.after(env)
    print(json.dumps({"benchmark": "optimize_vs_manual", "profile": "host", "max_accuracy_drop": args.bound,
                      "measurement": {**FINAL, "interleaved": True, "statistic": "median, distribution-free 95% CI"},
                      "results": out, "all_at_least_as_fast": all(r.get("at_least_as_fast") for r in out),
                      "environment": env}, indent=2))


if __name__ == "__main__":
    main()
