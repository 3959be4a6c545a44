"""ONNX Runtime's per-layer times: ``SessionOptions.enable_profiling`` writes a Chrome-trace JSON whose ``Node``
events named ``<node>_kernel_time`` carry each kernel's duration (us); means over ``runs`` inferences."""

from __future__ import annotations

import json
import os
import tempfile
from collections import defaultdict

from edgeopt.converters.backends.feeds import runtime_feeds
from edgeopt.deps import require


def parse_ort_trace(events: list[dict], runs: int) -> list[dict]:
    """Mean kernel time per node from an ONNX Runtime profile (list of trace events)."""
    total: dict[str, float] = defaultdict(float)
    op_type: dict[str, str] = {}
    for e in events:
        name = e.get("name", "")
        if e.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        node = name[: -len("_kernel_time")]
        total[node] += float(e.get("dur", 0))
        op_type[node] = (e.get("args") or {}).get("op_name", "")
    return [{"name": n, "op_type": op_type[n], "measured_us": t / max(runs, 1)} for n, t in total.items()]


def profile_onnxruntime(artifact_dir: str, manifest: dict, feeds: dict, *, threads: int | None = None,
                        runs: int = 20) -> list[dict]:
    ort = require("onnxruntime", "per-layer profiling")
    settings = manifest["runtime"].get("settings", {})
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.enable_profiling = True
    level = settings.get("graph_optimization_level", "ORT_ENABLE_ALL")
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    if threads:
        so.intra_op_num_threads = threads
    with tempfile.TemporaryDirectory(prefix="edgeopt-prof-") as tmp:
        so.profile_file_prefix = os.path.join(tmp, "ort")
        sess = ort.InferenceSession(os.path.join(artifact_dir, manifest["runtime"]["model"]), so,
                                    providers=["CPUExecutionProvider"])
        rt_feeds = runtime_feeds(manifest, feeds)
        for _ in range(runs + 1):
            sess.run(None, rt_feeds)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    # the first run is a warm-up: drop each node's first kernel event
    seen: set[str] = set()
    kept = []
    for e in events:
        name = e.get("name", "")
        if e.get("cat") == "Node" and name.endswith("_kernel_time") and name not in seen:
            seen.add(name)
            continue
        kept.append(e)
    return parse_ort_trace(kept, runs)
