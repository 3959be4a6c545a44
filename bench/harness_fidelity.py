"""Harness fidelity: does ``edgeopt bench`` report what the backends' own tools report?

Prints one JSON object:
- ``onnxruntime``: edgeopt's median vs a bare ``InferenceSession.run`` loop (same model, session
  options and threads), alternated over ``--rounds`` so both see the same machine noise;
- ``openvino``: edgeopt's median vs OpenVINO's ``benchmark_app -api sync -hint none -nstreams 1`` median
  (benchmark_app refuses -nthreads with a hint; one stream is what the LATENCY hint gives);
- ``openvino_throughput``: ``edgeopt bench --streams auto`` (THROUGHPUT hint, AsyncInferQueue) vs
  ``benchmark_app -hint throughput -api async``, queries a second;
- ``repeatability``: the medians of ``--repeats`` separate ``edgeopt bench`` processes and their CV.
Goals: ratios within 3 %, CV <= 3 %. The machine's load and the share of CPU time other
processes and other guests (steal) took during the script are printed beside the figures: on a
shared machine the goals can be missed for reasons that are not the harness's. Neither shows a VM
whose cores slow down for seconds while the host is busy: ``machine_noise_before``/``_after``
(bench/machine_noise.py) probe each core's speed, and ``quiet: false`` there explains a bimodal CV.

    .venv/bin/python bench/harness_fidelity.py [--model M.onnx] [--threads 2] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

GOAL = 0.03


def default_model() -> Path:
    try:
        from fixtures import fixture_model  # type: ignore[import-not-found]

        return Path(fixture_model("mobilenet"))
    except Exception:  # noqa: BLE001 - fall back to a model shipped inside the onnx package
        import onnx

        return Path(onnx.__file__).parent / "backend/test/data/light/light_squeezenet.onnx"


def make_artifacts(model: Path, work: Path) -> dict[str, Path]:
    """An ONNX Runtime and an OpenVINO (f32) artifact of ``model``, written by hand (no conversion)."""
    import onnx

    from edgeopt.model import graph_inputs, graph_outputs

    m = onnx.load(str(model))
    io = {"inputs": [t.to_json() for t in graph_inputs(m)], "outputs": [t.to_json() for t in graph_outputs(m)]}
    arts = {}
    ort_dir = work / "ort"
    ort_dir.mkdir()
    shutil.copyfile(model, ort_dir / "model.onnx")
    (ort_dir / "manifest.json").write_text(json.dumps({
        "backend": "onnxruntime", "precision": "fp32", "profile": "host", **io,
        "source_model": {"path": str(model), "sha256": "-"},
        "runtime": {"backend": "onnxruntime", "model": "model.onnx", "settings": {}}}))
    arts["onnxruntime"] = ort_dir
    try:
        import openvino as ov

        ov_dir = work / "ov"
        ov_dir.mkdir()
        ov.save_model(ov.convert_model(str(model)), str(ov_dir / "model.xml"), compress_to_fp16=False)
        (ov_dir / "manifest.json").write_text(json.dumps({
            "backend": "openvino", "precision": "fp32", "profile": "host", **io,
            "source_model": {"path": str(model), "sha256": "-"},
            "runtime": {"backend": "openvino", "model": "model.xml",
                        "settings": {"device": "CPU", "inference_precision": "f32"}}}))
        arts["openvino"] = ov_dir
    except ImportError:
        pass
    return arts


def edgeopt_median(art: Path, threads: int, seconds: float) -> float:
    from edgeopt.bench.api import BenchOptions, bench_artifacts

    res = bench_artifacts([art], BenchOptions(threads=threads, min_seconds=seconds, store=False))
    return res["rows"][0]["latency_ms"]["p50"]


def bare_ort_median(art: Path, threads: int, seconds: float) -> float:
    """Only the runtime's API: a session like the runner's, a perf_counter loop."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(str(art / "model.onnx"), so, providers=["CPUExecutionProvider"])
    i = sess.get_inputs()[0]
    x = {i.name: np.random.default_rng(0).standard_normal([d if isinstance(d, int) else 1 for d in i.shape])
         .astype(np.float32)}
    for _ in range(10):
        sess.run(None, x)
    times, t_end = [], time.perf_counter() + seconds
    while time.perf_counter() < t_end or len(times) < 50:
        t0 = time.perf_counter()
        sess.run(None, x)
        times.append(time.perf_counter() - t0)
    return float(np.median(times) * 1e3)


def benchmark_app_median(art: Path, threads: int, seconds: float) -> tuple[float | None, str]:
    exe = shutil.which("benchmark_app") or str(Path(sys.executable).parent / "benchmark_app")
    cmd = [exe, "-m", str(art / "model.xml"), "-d", "CPU", "-hint", "none", "-nstreams", "1", "-api", "sync", "-nthreads",
           str(threads), "-t", str(max(1, round(seconds))), "-infer_precision", "f32"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    m = re.search(r"Median:\s+([\d.]+)\s*ms", p.stdout)
    return (float(m.group(1)) if m else None), " ".join(cmd[1:])


def edgeopt_parallel_qps(art: Path, seconds: float) -> float:
    from edgeopt.bench.api import BenchOptions, bench_artifacts

    res = bench_artifacts([art], BenchOptions(min_runs=5, min_seconds=0, warmup=2, streams="auto",
                                              throughput_seconds=seconds, store=False))
    return res["rows"][0]["throughput"]["parallel"]["throughput_qps"]


def benchmark_app_throughput(art: Path, seconds: float) -> tuple[float | None, str]:
    exe = shutil.which("benchmark_app") or str(Path(sys.executable).parent / "benchmark_app")
    cmd = [exe, "-m", str(art / "model.xml"), "-d", "CPU", "-hint", "throughput", "-api", "async",
           "-t", str(max(1, round(seconds))), "-infer_precision", "f32"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    m = re.search(r"Throughput:\s+([\d.]+)\s*FPS", p.stdout)
    return (float(m.group(1)) if m else None), " ".join(cmd[1:])


def alternate(a, b, rounds: int, unit: str = "ms") -> dict:
    """``a()`` and ``b()`` in alternation; the ratio of each round, and their median."""
    ra, rb = [], []
    for i in range(rounds):  # ABBA order: neither side always runs first
        if i % 2 == 0:
            ra.append(a())
            rb.append(b())
        else:
            rb.append(b())
            ra.append(a())
    ratios = [x / y for x, y in zip(ra, rb, strict=True) if x and y]
    ratio = float(np.median(ratios)) if ratios else None
    return {f"edgeopt_{unit}": ra, f"reference_{unit}": rb, "ratios": ratios, "ratio": ratio,
            "within_goal": ratio is not None and abs(ratio - 1) <= GOAL}


def repeatability(art: Path, threads: int, seconds: float, repeats: int) -> dict:
    meds = []
    for _ in range(repeats):
        p = subprocess.run([sys.executable, "-m", "edgeopt", "bench", str(art), "--threads", str(threads),
                            "--min-seconds", str(seconds), "--no-store", "--json"], capture_output=True, text=True,
                           timeout=600)
        if p.returncode != 0:
            return {"error": p.stderr.strip().splitlines()[-1:]}
        meds.append(json.loads(p.stdout)["table"][0]["p50_ms"])
    from edgeopt.bench.stats import coefficient_of_variation

    cv = coefficient_of_variation(meds)
    return {"medians_ms": meds, "cv": cv, "within_goal": cv <= GOAL}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--noise-seconds", type=float, default=10.0,
                    help="seconds of bench/machine_noise.py's per-core probe before and after")
    args = ap.parse_args()
    model = args.model or default_model()
    from edgeopt.converters.registry import distributions
    from edgeopt.runtime import environment

    out: dict = {"model": str(model), "threads": args.threads, "seconds_per_measurement": args.seconds,
                 "goal": f"ratio within {GOAL:.0%}, CV <= {GOAL:.0%}", "load_before": list(os.getloadavg())}
    counters = environment.cpu_counters()
    sys.path.insert(0, str(Path(__file__).parent))
    from machine_noise import probe  # type: ignore[import-not-found]

    out["machine_noise_before"] = probe(args.noise_seconds)
    with tempfile.TemporaryDirectory(prefix="edgeopt-fidelity-") as tmp:
        arts = make_artifacts(model, Path(tmp))
        out["onnxruntime"] = {
            "reference": "bare onnxruntime InferenceSession.run loop (ALL optimisation, as the onnxruntime backend ships it; same threads)",
            **alternate(lambda: edgeopt_median(arts["onnxruntime"], args.threads, args.seconds),
                        lambda: bare_ort_median(arts["onnxruntime"], args.threads, args.seconds), args.rounds)}
        if "openvino" in arts:
            cmd = []

            def bapp():
                med, c = benchmark_app_median(arts["openvino"], args.threads, args.seconds)
                cmd[:] = [c]
                return med

            out["openvino"] = {**alternate(lambda: edgeopt_median(arts["openvino"], args.threads, args.seconds),
                                           bapp, args.rounds)}
            out["openvino"]["reference"] = f"benchmark_app {cmd[0] if cmd else ''}"

            def bapp_tp():
                qps, c = benchmark_app_throughput(arts["openvino"], args.seconds)
                cmd[:] = [c]
                return qps

            # throughput (q/s, higher is better): edgeopt --streams auto vs benchmark_app's async mode
            out["openvino_throughput"] = alternate(lambda: edgeopt_parallel_qps(arts["openvino"], args.seconds),
                                                   bapp_tp, args.rounds, unit="qps")
            out["openvino_throughput"]["reference"] = f"benchmark_app {cmd[0] if cmd else ''}"
        else:
            out["openvino"] = {"skipped": "openvino is not installed"}
        out["repeatability"] = repeatability(arts["onnxruntime"], args.threads, args.seconds, args.repeats)
    out["machine_noise_after"] = probe(args.noise_seconds)
    out["load_after"] = list(os.getloadavg())
    # CPU time other processes (not this script or the tools it ran) and other guests took meanwhile
    out["interference"] = environment.interference(counters, environment.cpu_counters())
    out["environment"] = {k: v for k, v in environment.collect(libraries=distributions()).items() if k in ("cpu", "libraries", "python")}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
