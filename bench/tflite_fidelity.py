"""TFLite backend figures (prints one JSON object).

1. Fidelity: basic-pitch's own ``nmp.onnx`` converted by edgeopt (``convert --backend tflite --precision fp32``)
   against the ``nmp.tflite`` basic-pitch ships, both run in LiteRT on the same audio (synthetic inputs,
   labelled as such: a two-note chord, white noise, silence). Goal: max abs diff <= 1e-5 on every output.
   Outputs are matched by name order: tf2onnx's ``StatefulPartitionedCall:i`` is the i-th of the Keras
   model's sorted output names (``contour``, ``note``, ``onset``), the names in the shipped file.
2. Digits and MNIST CNNs (real, person-labelled test splits): TFLite FP32 and INT8 (calibrated on the
   fixtures' calibration split) against ONNX Runtime FP32: top-1 accuracy, and latency p10/p50/p90 measured
   interleaved by ``edgeopt.bench.bench_artifacts`` (same process, round-robin blocks), threads as given.

Run: ``.venv/bin/python bench/tflite_fidelity.py [--threads 1] [--runs 300] [--skip-fidelity] [--skip-cnn]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

AUDIO_LEN, SR = 43844, 22050


def _audio() -> dict[str, np.ndarray]:
    t = np.arange(AUDIO_LEN) / SR
    chord = 0.3 * np.sin(2 * np.pi * 440.0 * t) + 0.2 * np.sin(2 * np.pi * 554.37 * t)
    noise = np.random.default_rng(0).normal(0, 0.1, AUDIO_LEN)
    return {name: a.astype(np.float32).reshape(1, AUDIO_LEN, 1)
            for name, a in (("chord_a4_cs5", chord), ("white_noise", noise), ("silence", np.zeros(AUDIO_LEN)))}


def fidelity(work: Path) -> dict:
    from edgeopt.convert import convert
    from edgeopt.runtime.runners import open_runner
    from edgeopt.wrapped_artifact import wrap_model_file as wrap_tflite
    from fixtures.real_models import real_model

    onnx_path, shipped = real_model("basic_pitch_onnx"), real_model("basic_pitch_tflite")
    t0 = time.perf_counter()
    res = convert(str(onnx_path), "host", str(work / "bp_fp32"), backend="tflite", precision="fp32",
                  input_shapes={"serving_default_input_2:0": (1, AUDIO_LEN, 1)}, force=True)
    seconds = time.perf_counter() - t0
    ref = wrap_tflite(shipped, work / "bp_shipped")
    rows, worst = [], 0.0
    with open_runner(res.artifact_dir) as ours, open_runner(str(ref)) as theirs:
        in_ours, in_theirs = ours.inputs[0]["name"], theirs.inputs[0]["name"]
        for label, x in _audio().items():
            a, b = ours.run({in_ours: x}), theirs.run({in_theirs: x})
            for i, name in enumerate(sorted(b)):
                d = float(np.max(np.abs(a[f"StatefulPartitionedCall:{i}"] - b[name])))
                worst = max(worst, d)
                rows.append({"input": label, "output": name, "onnx_output": f"StatefulPartitionedCall:{i}",
                             "max_abs_diff": d, "max_abs_value": float(np.max(np.abs(b[name])))})
    return {"model": "basic-pitch nmp.onnx -> edgeopt tflite fp32 vs shipped nmp.tflite (both in LiteRT)",
            "inputs": "synthetic audio (chord, noise, silence) at 22050 Hz", "conversion_seconds": round(seconds, 1),
            "validation_vs_onnxruntime": res.validation, "max_abs_diff": worst, "goal": 1e-5,
            "met": worst <= 1e-5, "rows": rows}


def cnn_figures(work: Path, name: str, threads: int, runs: int) -> dict:
    from edgeopt.bench.api import BenchOptions, bench_artifacts
    from edgeopt.convert import convert

    model = REPO / "fixtures" / "models" / f"{name}_cnn.onnx"
    calib, test = (REPO / "fixtures" / "data" / f"{name}_{s}.npz" for s in ("calib", "test"))
    variants = {"onnxruntime-fp32": ("onnxruntime", "fp32"), "tflite-fp32": ("tflite", "fp32"),
                "tflite-int8": ("tflite", "int8")}
    arts, out = {}, {"model": model.name, "threads": threads, "variants": {}}
    for label, (backend, precision) in variants.items():
        t0 = time.perf_counter()
        r = convert(str(model), "host", str(work / f"{name}-{label}"), backend=backend, precision=precision,
                    calib=str(calib), eval=str(test), threads=threads, force=True)
        v = r.validation
        out["variants"][label] = {"convert_seconds": round(time.perf_counter() - t0, 1), "accuracy": v["accuracy"],
                                  "accuracy_reference_ort_fp32": v["accuracy_reference"],
                                  "accuracy_drop": v["accuracy_drop"], "cosine_min": v["cosine_min"],
                                  "eval_samples": v["samples"]}
        arts[r.artifact_dir] = label
    opts = BenchOptions(threads=threads, min_runs=runs, min_seconds=3.0, warmup=20, store=False,
                        inputs=str(test))
    measured = bench_artifacts(list(arts), opts, names=arts)
    for row in measured["rows"]:
        lat = row["latency_ms"]
        out["variants"][row["name"]]["latency_ms"] = lat
    base = out["variants"]["onnxruntime-fp32"]["latency_ms"]["p50"]
    for v in out["variants"].values():
        v["speedup_vs_ort_fp32_p50"] = round(base / v["latency_ms"]["p50"], 3) if v.get("latency_ms") else None
    env = measured["environment"]
    out["environment"] = {k: env.get(k) for k in ("cpu", "cores_used", "load_before", "location", "libraries")}
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--skip-fidelity", action="store_true")
    ap.add_argument("--skip-cnn", action="store_true")
    args = ap.parse_args()
    result: dict = {"bench": "tflite_fidelity", "loadavg_start": os.getloadavg()}
    with tempfile.TemporaryDirectory(prefix="tflite-bench-") as d:
        work = Path(d)
        if not args.skip_fidelity:
            result["fidelity_basic_pitch"] = fidelity(work)
        if not args.skip_cnn:
            result["cnn"] = {n: cnn_figures(work, n, args.threads, args.runs) for n in ("digits", "mnist")}
    result["loadavg_end"] = os.getloadavg()
    print(json.dumps(result, default=str))


if __name__ == "__main__":
    main()
