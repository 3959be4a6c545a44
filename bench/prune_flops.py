"""Structured channel pruning: FLOPs, parameters, accuracy and ONNX Runtime latency per ratio (prints JSON).

Models: the MNIST CNN (``fixtures/models/mnist_cnn.onnx``, real MNIST test split, person-labelled) and, when
the fixture generator is present, the MobileNet-like net (random weights: its "accuracy" is meaningless, so
only the top-1 agreement and cosine against the unpruned model on random inputs are shown, labelled synthetic).
No fine-tuning: accuracies are of the pruned weights as they are. Latency: ONNX Runtime CPU, 1 thread,
variants measured interleaved (rounds over all ratios) to share the machine's noise; p10/p50/p90 in ms.
Each model also gets ratio 0.3 with ``round_to=8`` (SIMD-friendly channel counts) and a 2:4-sparse variant.
Goal: 30 % of channels removed cuts the MNIST CNN's FLOPs by 25 % or more.

Run: ``.venv/bin/python bench/prune_flops.py [--ratios 0.1,0.3,0.5] [--runs 200] [--no-mobilenet]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _session(path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _accuracy(sess, x, y) -> float:
    name = sess.get_inputs()[0].name
    pred = [int(np.argmax(sess.run(None, {name: x[i : i + 1]})[0])) for i in range(len(y))]
    return float(np.mean(np.array(pred) == y))


def _latency(sessions: dict, feed: dict, runs: int, rounds: int = 10) -> dict:
    times: dict = {k: [] for k in sessions}
    for s in sessions.values():
        for _ in range(10):
            s.run(None, feed)
    per_round = max(1, runs // rounds)
    for _ in range(rounds):
        for k, s in sessions.items():
            for _ in range(per_round):
                t = time.perf_counter()
                s.run(None, feed)
                times[k].append((time.perf_counter() - t) * 1e3)
    return {k: {"p10_ms": float(np.percentile(v, 10)), "p50_ms": float(np.percentile(v, 50)),
                "p90_ms": float(np.percentile(v, 90)), "runs": len(v)} for k, v in times.items()}


def bench_model(name, path, ratios, runs, work, x=None, y=None, calib=None, round8=(0.3,)) -> dict:
    from edgeopt.converters.base import ChainContext, Intermediate, PruneMode
    from edgeopt.converters.prune import Prune
    from edgeopt.converters.prune_config import PruneConfig
    from edgeopt.data import Dataset
    from edgeopt.model import graph_inputs, load_onnx

    spec = graph_inputs(load_onnx(path))[0]
    shape = [d if isinstance(d, int) else 1 for d in spec.shape]
    synthetic = x is None
    if synthetic:
        x = np.random.default_rng(0).random((32, *shape[1:]), dtype=np.float32)
    if synthetic:
        calib = x[16:]  # synthetic too, disjoint from the check samples
    checks = Dataset({spec.name: x[:16]}, ranks={spec.name: len(shape)})
    calib_ds = Dataset({spec.name: calib}, ranks={spec.name: len(shape)}) if calib is not None else None
    variants = {"0.0": Path(path)}
    rows = {"0.0": {}}
    configs = {str(r): PruneConfig(ratio=r) for r in ratios}
    configs.update({f"{r}/round_to=8": PruneConfig(ratio=r, round_to=8) for r in ratios if r in round8})
    for key, cfg in configs.items():
        ctx = ChainContext(work_dir=work / f"{name}-{len(variants)}", artifact_dir=work / "a",
                           reference_model=Path(path), check_samples=checks, calib=calib_ds)
        t = time.perf_counter()
        out = Prune().run(Intermediate(Path(path)), cfg, ctx)
        rep, chk = ctx.record.report, ctx.record.checks
        variants[key] = out.path
        rows[key] = {"prune_seconds": round(time.perf_counter() - t, 3), "flops": rep["flops_after"],
                        "channels_kept": {k: v["channels_after"] for k, v in rep["layers"].items()},
                        "params": rep["params_after"], "flops_reduction": round(rep["flops_reduction"], 4),
                        "params_reduction": round(rep["params_reduction"], 4), "layers_pruned": len(rep["layers"]),
                        "layers_skipped": rep["skipped"], "cosine_vs_unpruned_mean": chk["vs_unpruned"]["cosine_mean"],
                        "top1_agreement_vs_unpruned": chk["vs_unpruned"]["top1_agreement"],
                        "bias_compensation": rep.get("bias_compensation")}
        rows["0.0"].update({"flops": rep["flops_before"], "params": rep["params_before"]})
    ctx = ChainContext(work_dir=work / f"{name}-2of4", artifact_dir=work / "a",
                       reference_model=Path(path), check_samples=checks)
    out = Prune().run(Intermediate(Path(path)), PruneConfig(mode=PruneMode.SPARSE_2_4), ctx)
    variants["2:4"] = out.path
    rep = ctx.record.report
    rows["2:4"] = {"layers_covered": len(rep["layers_covered"]), "layers_not_covered": len(rep["layers_not_covered"]),
                   "zero_share_covered": rep["zero_share_covered"],
                   "covered_share_of_float_params": rep["covered_share_of_float_params"],
                   "cosine_vs_unpruned_mean": ctx.record.checks["vs_unpruned"]["cosine_mean"],
                   "note": "dense kernels here: no speed-up expected without a sparse runtime (TensorRT, Ampere+)"}
    sessions = {k: _session(p) for k, p in variants.items()}
    if not synthetic:
        for k, s in sessions.items():
            rows[k]["accuracy"] = _accuracy(s, x, y)
    lat = _latency(sessions, {spec.name: x[:1].reshape(shape)}, runs)
    for k in rows:
        rows[k]["ort_latency_1thread"] = lat[k]
    return {"model": name, "path": str(path),
            "data": "synthetic random inputs (checks and bias-compensation calibration)" if synthetic
            else f"{len(y)} test samples; calibration for bias compensation: {len(calib)} samples of the calib split",
            "by_ratio": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ratios", default="0.1,0.3,0.5")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--no-mobilenet", action="store_true")
    a = ap.parse_args()
    ratios = [float(r) for r in a.ratios.split(",")]
    import onnxruntime

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        mnist = REPO / "fixtures" / "models" / "mnist_cnn.onnx"
        if mnist.exists():
            d = np.load(REPO / "fixtures" / "data" / "mnist_test.npz")
            c = np.load(REPO / "fixtures" / "data" / "mnist_calib.npz")
            results.append(bench_model("mnist_cnn", mnist, ratios, a.runs, work, d["input"], d["labels"], c["input"][:64]))
        if not a.no_mobilenet:
            try:
                from fixtures import fixture_model

                results.append(bench_model("mobilenet (random weights)", fixture_model("mobilenet"), ratios,
                                           a.runs, work))
            except (ImportError, KeyError) as err:
                results.append({"model": "mobilenet", "skipped": str(err)})
    mn = next((r for r in results if r["model"] == "mnist_cnn"), None)
    goal = None
    if mn and "0.3" in mn["by_ratio"]:
        goal = {"target": "ratio 0.3 -> FLOPs -25 % or more", "flops_reduction": mn["by_ratio"]["0.3"]["flops_reduction"],
                "met": mn["by_ratio"]["0.3"]["flops_reduction"] >= 0.25}
    print(json.dumps({
        "bench": "prune_flops", "goal_mnist": goal, "results": results,
        "notes": "no fine-tuning; FLOPs = 2 x MACs of Conv/Gemm/MatMul (edgeopt's own counter); latency on a shared machine",
        "environment": {"python": platform.python_version(), "onnxruntime": onnxruntime.__version__,
                        "cpu_count": os.cpu_count(), "loadavg": os.getloadavg(), "machine": platform.machine(),
                        "threads": 1},
    }, indent=1))


if __name__ == "__main__":
    main()
