"""TVM on this host: untuned vs MetaSchedule-tuned latency next to ONNX Runtime FP32 (prints JSON).

For each model (default: the MNIST CNN, ``fixtures/models/mnist_cnn.onnx``; ``--mobilenet`` adds the
generated MobileNet-like net, random weights): the model is normalized as ``convert`` does, built
untuned (``tvm.compile``), tuned with ``edgeopt tune``'s code for a fixed trial budget into a fresh
database, then built again from that database (the "second build": what a later ``convert`` pays,
no re-tuning). INT8 (MNIST, real calibration split): the chain's QDQ model in ONNX Runtime and in TVM
(untuned; TVM lowers QDQ to float arithmetic). ONNX Runtime FP32 (graph optimization EXTENDED, as the onnxruntime backend ships it),
TVM untuned and TVM tuned are timed interleaved on the same input (``measure_interleaved``: rounds over
the variants share the machine's noise); p10/p50/p90 in ms, with the run counts and load average.

Budget: ``--trials`` (default 32) per model; a trial costs ~10 s on 2 idle cores (more when the
machine is shared), plus ~30 s per build-worker start. The figures of a shared machine can be off by
several times: read them with the load average printed beside them.

Run: ``.venv/bin/python bench/tvm_tuning.py [--trials 32] [--threads 2] [--mobilenet]``.
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


def _stats(r: dict) -> dict:
    p10, p50, p90 = np.percentile(np.asarray(r["samples_ms"]), [10, 50, 90])
    return {"p10": round(float(p10), 4), "p50": round(float(p50), 4), "p90": round(float(p90), 4), "runs": r["runs"]}


def _backend_input(model: Path, work: Path, precision: str = "fp32", calib: Path | None = None) -> Path:
    """The model as the TVM backend sees it in ``convert`` (normalize, and for INT8 the qdq stage's Q/DQ)."""
    import onnx

    from edgeopt.options import ConvertOptions
    from edgeopt.tune import backend_input, tune_plan

    options = ConvertOptions(precision=precision, calib=calib)
    proto = backend_input(model, tune_plan("host", options), options, work_dir=work)
    out = work / f"{model.stem}.{precision}.onnx"
    onnx.save(proto, out)
    return out


def bench_model(name: str, model: Path, trials: int, threads: int, work: Path, calib: Path | None) -> dict:
    import onnxruntime as ort
    import tvm
    from tvm.runtime.vm import VirtualMachine

    from edgeopt.converters.backends.tvm import build as tb
    from edgeopt.model import graph_inputs, load_onnx
    from edgeopt.profiles import load_profile
    from edgeopt.runtime.measure import measure_interleaved
    from edgeopt.tune import tune

    os.environ["TVM_NUM_THREADS"] = str(threads)
    norm = _backend_input(model, work)
    proto = load_onnx(norm, check=False)
    specs = graph_inputs(proto)
    rng = np.random.default_rng(0)
    feeds = {s.name: rng.random(tuple(s.shape), dtype=np.float32) for s in specs}
    target_dict = tb.resolve_target(load_profile("host").backend("tvm").settings.get("target"))
    target = tb.make_target(target_dict)
    mod = tb.import_onnx(proto)

    t0 = time.perf_counter()
    untuned = tb.build(mod, target)
    t_untuned = time.perf_counter() - t0
    db = work / f"db-{name}"
    t0 = time.perf_counter()
    tuned_result = tune(model, "host", trials=trials, tuning_db=db, precision="fp32")
    t_tune = time.perf_counter() - t0
    t0 = time.perf_counter()
    tuned = tb.build(mod, target, db)
    t_second = time.perf_counter() - t0

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    sess = ort.InferenceSession(str(norm), so, providers=["CPUExecutionProvider"])
    variants = {"onnxruntime_fp32_ms": lambda: sess.run(None, feeds)}

    def vm_fn(executable):
        path = work / f"{name}-{id(executable)}.so"
        tb.export(executable, path, target_dict)
        vm = VirtualMachine(tvm.runtime.load_module(str(path)), tvm.cpu())
        args = [tvm.runtime.tensor(feeds[s.name]) for s in specs]
        main = vm["main"]
        return lambda: main(*args)

    f_untuned, f_tuned = vm_fn(untuned), vm_fn(tuned)
    ref = sess.run(None, feeds)[0]
    for f in (f_untuned, f_tuned):
        out = f()
        got = (out if hasattr(out, "numpy") else out[0]).numpy()
        assert np.allclose(got, ref, atol=1e-3, rtol=1e-3), "TVM output differs from ONNX Runtime"
    variants.update({"tvm_untuned_ms": f_untuned, "tvm_tuned_ms": f_tuned})
    if calib is not None:  # INT8: the chain's QDQ model, in ONNX Runtime and in TVM (untuned)
        qdq = _backend_input(model, work, "int8", calib)
        q_sess = ort.InferenceSession(str(qdq), so, providers=["CPUExecutionProvider"])
        variants["onnxruntime_int8_qdq_ms"] = lambda: q_sess.run(None, feeds)
        variants["tvm_int8_qdq_untuned_ms"] = vm_fn(tb.build(tb.import_onnx(load_onnx(qdq, check=False)), target))
    load_before = os.getloadavg()
    results = measure_interleaved(list(variants.values()), warmup=5, min_runs=30, min_seconds=2.0, max_seconds=180.0)
    timed = {k: _stats(r) for k, r in zip(variants, results, strict=True)}
    ort_s, untuned_s, tuned_s = timed["onnxruntime_fp32_ms"], timed["tvm_untuned_ms"], timed["tvm_tuned_ms"]
    return {
        "model": str(model.relative_to(REPO)) if model.is_relative_to(REPO) else str(model),
        "input_shapes": {s.name: list(s.shape) for s in specs},
        **timed,
        "tuned_vs_untuned_speedup_p50": round(untuned_s["p50"] / tuned_s["p50"], 2),
        "tuned_vs_onnxruntime_p50": round(tuned_s["p50"] / ort_s["p50"], 2),
        "tuning": {"trials_budget": trials, "trials_measured": tuned_result.trials_measured,
                   "trials_failed": tuned_result.trials_failed, "tasks": len(tuned_result.tasks),
                   "records": tuned_result.records, "tuning_seconds": round(t_tune, 1)},
        "build_seconds": {"untuned": round(t_untuned, 2), "from_saved_database": round(t_second, 2)},
        "reuse_gain": {"note": "a later convert applies the saved database: it pays the build, not the tuning",
                       "seconds_saved": round(t_tune - t_second, 1)},
        "load_average_before_timing": [round(x, 2) for x in load_before],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mobilenet", action="store_true", help="also the MobileNet-like net (random weights)")
    args = ap.parse_args()
    import fixtures

    models = [("mnist_cnn", fixtures.fixture_model("mnist_cnn"), fixtures.fixture_data("mnist_calib"))]
    if args.mobilenet:
        models.append(("mobilenet", fixtures.fixture_model("mobilenet"), None))
    from edgeopt.deps import version_of
    from edgeopt.runtime.environment import collect

    env = collect("local", libraries=("numpy", "onnxruntime"))
    out = {"bench": "tvm_tuning", "budget": {"trials_per_model": args.trials, "threads": args.threads},
           "environment": {"machine": platform.machine(), "cpu": env.get("cpu"), "cores": os.cpu_count(),
                           "load_average_start": [round(x, 2) for x in os.getloadavg()],
                           "versions": {d: version_of(d) for d in ("apache-tvm", "apache-tvm-ffi", "onnxruntime")}},
           "data": "random inputs (latency only; outputs checked against ONNX Runtime)", "models": []}
    with tempfile.TemporaryDirectory(prefix="bench-tvm-") as work:
        os.environ.setdefault("EDGEOPT_CACHE_DIR", str(Path(work) / "cache"))
        for name, path, calib in models:
            out["models"].append(bench_model(name, Path(path), args.trials, args.threads, Path(work),
                                             Path(calib) if calib else None))
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
