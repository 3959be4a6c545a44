"""The graph as the runtime loads it: after the runtime's own optimizations (ONNX Runtime's optimized model,
OpenVINO's compiled runtime model), summarised: op types, Q/DQ by dtype, precisions, nodes per provider."""

from __future__ import annotations

from pathlib import Path

SUFFIX = {"onnxruntime": ".as-loaded.onnx", "openvino": ".as-loaded.xml"}


def default_output(artifact_dir: str | Path, backend: str) -> Path:
    """Where the as-loaded graph is written by default: beside the artifact directory (the artifact itself is left
    as its manifest lists it)."""
    d = Path(artifact_dir).resolve()
    return d.parent / f"{d.name}{SUFFIX[backend]}"


def as_loaded(artifact_dir: str | Path, manifest: dict, out_path: str | Path | None = None) -> dict:
    """The artifact's graph after its runtime's own optimizations, written to ``out_path`` (default: beside the
    artifact), and its summary."""
    from edgeopt.errors import UsageError

    backend = manifest["backend"]
    if backend not in SUFFIX:
        raise UsageError(f"--as-loaded reads ONNX Runtime and OpenVINO artifacts, not {backend}",
                         "inspect an artifact written with --backend onnxruntime or openvino")
    out = Path(out_path) if out_path else default_output(artifact_dir, backend)
    if backend == "onnxruntime":
        from edgeopt.as_loaded.onnxruntime import as_loaded as ort_loaded

        return ort_loaded(artifact_dir, manifest, out)[0]
    from edgeopt.as_loaded.openvino import as_loaded as ov_loaded

    return ov_loaded(artifact_dir, manifest, out)[0]


def as_loaded_text(facts: dict) -> list[str]:
    """The summary in a few lines."""
    lines = [f"as loaded ({facts['graph']}): {facts['nodes']} nodes" +
             (f", written to {facts['written']}" if facts.get("written") else "")]
    lines.append("  op types: " + ", ".join(f"{k} {v}" for k, v in facts["op_types"].items()))
    if facts["runtime"] == "onnxruntime":
        if facts["disabled_optimizers"]:
            lines.append("  disabled optimizers: " + ", ".join(facts["disabled_optimizers"]))
        if facts["qdq_by_dtype"]:
            lines.append("  Q/DQ by dtype: " + ", ".join(f"{k} {v}" for k, v in facts["qdq_by_dtype"].items()))
        lines.append(f"  int32 DequantizeLinear: {len(facts['int32_dq'])}" +
                     (f" ({', '.join(facts['int32_dq'][:4])}{'…' if len(facts['int32_dq']) > 4 else ''})"
                      if facts["int32_dq"] else ""))
        if facts["nodes_per_provider"]:
            lines.append("  nodes per provider (checked with " + facts["assignment_checked_with"] + "): " +
                         ", ".join(f"{k} {v}" for k, v in facts["nodes_per_provider"].items()))
    else:
        lines.append("  runtime precision: " + ", ".join(f"{k} {v}" for k, v in facts["runtime_precision"].items()))
    return lines
