"""OpenVINO's per-layer times: compile with ``PERF_COUNT`` and read ``InferRequest.profiling_info``
(``real_time`` per node); means over ``runs`` inferences."""

from __future__ import annotations

import os
from collections import defaultdict

from edgeopt.converters.backends.feeds import runtime_feeds
from edgeopt.deps import require


def profile_openvino(artifact_dir: str, manifest: dict, feeds: dict, *, threads: int | None = None,
                     runs: int = 20) -> list[dict]:
    ov = require("openvino", "per-layer profiling")
    settings = manifest["runtime"].get("settings", {})
    core = ov.Core()
    config = {"PERF_COUNT": True}
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    if settings.get("inference_precision"):
        config["INFERENCE_PRECISION_HINT"] = settings["inference_precision"]
    model = core.read_model(os.path.join(artifact_dir, manifest["runtime"]["model"]))
    compiled = core.compile_model(model, settings.get("device", "CPU"), config)
    req = compiled.create_infer_request()
    rt_feeds = runtime_feeds(manifest, feeds)
    req.infer(rt_feeds)
    total: dict[str, float] = defaultdict(float)
    kinds: dict[str, str] = {}
    for _ in range(runs):
        req.infer(rt_feeds)
        for p in req.profiling_info:
            if str(p.status).endswith("NOT_RUN"):
                continue
            total[p.node_name] += p.real_time.total_seconds() * 1e6
            kinds[p.node_name] = f"{p.node_type} ({p.exec_type})"
    return [{"name": n, "op_type": kinds[n], "measured_us": t / runs} for n, t in total.items()]
