"""The cascade measured before it is kept: the stage models (ONNX Runtime, one thread, this host) run through the
cascade runner over samples of ``--eval``, against the plain model timed the same way. A prediction from stage
times alone misses what each extra call costs (the runner, the copies between stages, the softmax of each head)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import numpy as np

SAMPLES = 64  # of --eval, timed on both
REPEATS = 3  # runs per sample (the median)


def _ort_runtime(model_name: str, inputs: list[str], outputs: list[str]) -> dict:
    io = {"inputs": [{"name": n, "runtime_name": n, "transpose": None} for n in inputs],
          "outputs": [{"name": n, "runtime_name": n, "transpose": None} for n in outputs]}
    settings = {"provider": "CPUExecutionProvider", "graph_optimization_level": "ORT_ENABLE_ALL", "threads": 1}
    return {"backend": "onnxruntime", "model": model_name, "settings": settings, "io": io}


def measured_ratio(draft: dict, plain_model: Path, dataset, work: Path) -> dict:
    """{"cascade_ms", "plain_ms", "ratio", "samples"}: mean latency over the first samples of ``dataset``."""
    import onnx

    from edgeopt.runtime.cascade import CascadeRunner
    from edgeopt.runtime.runners import open_runner

    root = work / "measured_cascade"
    shutil.rmtree(root, ignore_errors=True)
    stages = []
    for s in draft["stages"]:
        sub = root / s["entry"]["dir"]
        sub.mkdir(parents=True)
        shutil.copyfile(s["path"], sub / "model.onnx")
        g = onnx.load(str(s["path"]), load_external_data=False).graph
        inits = {t.name for t in g.initializer}
        ins, outs = [i.name for i in g.input if i.name not in inits], [o.name for o in g.output]
        stages.append({**s["entry"], "runtime": _ort_runtime("model.onnx", ins, outs),
                       "inputs": [{"name": n} for n in ins], "outputs": [{"name": n} for n in outs]})
    (root / "cascade.json").write_text(json.dumps({"output": draft["output"], "scores": draft["scores"],
                                                   "stages": stages}))
    manifest = {"runtime": {"cascade": "cascade.json"}, "inputs": [], "outputs": []}
    cascade = CascadeRunner(str(root), manifest, threads=1, open_runner=open_runner)
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level, so.intra_op_num_threads, so.inter_op_num_threads = 3, 1, 1
    plain = ort.InferenceSession(str(plain_model), so, providers=["CPUExecutionProvider"])
    n = min(SAMPLES, len(dataset))
    t_cascade, t_plain = [], []
    for i in range(n):
        feeds = dataset.feed(i)
        t_cascade.append(_timed(lambda f=feeds: cascade.run(f)))
        t_plain.append(_timed(lambda f=feeds: plain.run(None, f)))
    cascade.close()
    c, p = float(np.mean(t_cascade)), float(np.mean(t_plain))
    return {"cascade_ms": round(c, 4), "plain_ms": round(p, 4), "ratio": round(c / p, 3), "samples": n,
            "timed_with": "ONNX Runtime, 1 thread, this host, each sample the median of 3 runs"}


def _timed(fn) -> float:
    fn()
    times = []
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) * 1000.0
