#!/usr/bin/env python3
"""On a machine with an NVIDIA GPU and onnxruntime-gpu: each Jetson artifact through edgeopt's runner (providers as
the manifest says: TensorRT, then CUDA, then CPU), its outputs against this artifact's CPU check outputs, and the
placement report from ONNX Runtime's own node assignment, with and without the artifact's disabled optimizers."""
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from edgeopt.converters.backends.onnxruntime.placement import ort_placement
from edgeopt.runtime.runners import open_runner

ART = Path(sys.argv[1])  # a folder of artifacts, each with check_inputs.npz and check_cpu_outputs.npz
res = {"onnxruntime": ort.__version__, "available_providers": ort.get_available_providers(), "cases": []}


def summary(rep):
    keep = ("source", "how", "units", "islands", "copies", "bytes_crossing", "copy_cost_estimate_ms", "target")
    return {k: rep.get(k) for k in keep if k in rep} or rep


for art in sorted(p for p in ART.iterdir() if (p / "manifest.json").exists()):
    m = json.loads((art / "manifest.json").read_text())
    settings = m["runtime"]["settings"]
    row = {"model": art.name, "precision": m.get("precision"), "settings": settings}
    try:
        feeds = dict(np.load(art / "check_inputs.npz"))
        ref = dict(np.load(art / "check_cpu_outputs.npz"))
        n = len(next(iter(feeds.values())))
        with open_runner(str(art)) as run:
            outs = [run.run({k: v[i:i + 1] for k, v in feeds.items()}) for i in range(n)]
            got = {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}
            row["max_abs_diff_vs_cpu"] = {k: float(np.max(np.abs(got[k].astype(np.float64) - ref[k]))) for k in ref}
            row["top1_agree_vs_cpu"] = {k: float(np.mean(got[k].reshape(n, -1).argmax(1) == ref[k].reshape(n, -1).argmax(1))) for k in ref}
            row["runner_info"] = {k: getattr(run, k) for k in ("provider", "providers", "runs_as", "execution") if hasattr(run, k)}
            one = {k: v[:1] for k, v in feeds.items()}
            for _ in range(20):
                run.run(one)
            t = []
            for _ in range(200):
                t0 = time.perf_counter()
                run.run(one)
                t.append(time.perf_counter() - t0)
            row["int8_median_ms"] = round(1000 * float(np.median(t)), 3)
        model_file = art / m["runtime"]["model"]
        rep = ort_placement(model_file, settings, target_unit="gpu", bandwidth_gbps=None)
        row["placement"] = summary(rep)
        off = {**settings, "disabled_optimizers": []}
        row["placement_without_disabled_optimizers"] = summary(ort_placement(model_file, off, target_unit="gpu", bandwidth_gbps=None))
    except Exception:  # report and go on to the next model
        import traceback
        row["error"] = traceback.format_exc()[-2000:]
    res["cases"].append(row)
    print(json.dumps(row, default=str)[:3000], flush=True)
Path(sys.argv[2]).write_text(json.dumps(res, indent=1, default=str))
