"""ONNX Runtime's graph as loaded: the model after its own optimizers, written with
``SessionOptions.optimized_model_filepath``, with the session's node-to-provider assignment.

Which graph a provider receives: ONNX Runtime applies its basic-level optimizers (constant folding, redundant-node
removal, ``WeightBiasQuantization``…) to the whole graph before the providers split it; the higher levels' fusions
(QLinearConv, NHWC layouts) apply only to nodes the CPU provider runs. So for an artifact whose provider is not the
CPU (TensorRT, CUDA) the graph written is the one at the basic level (or the artifact's own level, if lower): the
graph that provider is offered; for a CPU artifact it is the artifact's level.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

from edgeopt.deps import require

CPU = "CPUExecutionProvider"
LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_BASIC", "ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL")
QDQ = ("QuantizeLinear", "DequantizeLinear")


def loaded_level(settings: dict) -> str:
    """The optimization level whose graph the artifact's provider receives (see the module's docstring)."""
    level = settings.get("graph_optimization_level") or "ORT_ENABLE_ALL"
    if (settings.get("provider") or CPU) != CPU:
        return LEVELS[min(LEVELS.index(level), 1)]
    return level


def optimized_model(model_path: str | Path, settings: dict, out_path: str | Path, *,
                    disabled_optimizers: list[str] | None = None) -> tuple[object, list[dict]]:
    """Load ``model_path`` on the CPU provider with the artifact's session options (``settings``: the manifest's
    ``runtime.settings``, its ``disabled_optimizers`` unless ``disabled_optimizers`` is given), write the optimized
    graph to ``out_path``; return it (an ``onnx.ModelProto``) and the session's assignment: one row per provider
    with its nodes (name, op_type)."""
    ort = require("onnxruntime", "the graph as loaded")
    import onnx

    from edgeopt.runtime.runners.onnxruntime import session_kwargs, session_options, stdout_to_stderr

    settings = dict(settings, graph_optimization_level=loaded_level(settings))
    if disabled_optimizers is not None:
        settings["disabled_optimizers"] = list(disabled_optimizers)
    so = session_options(ort, settings, settings.get("threads"))
    so.optimized_model_filepath = str(out_path)
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    with stdout_to_stderr():
        sess = ort.InferenceSession(str(model_path), so, providers=[CPU], **session_kwargs(settings))
    return onnx.load(str(out_path)), assignment(sess)


def assignment(sess) -> list[dict]:
    """The session's nodes by provider (``get_provider_graph_assignment_info``; empty where this ONNX Runtime lacks
    it)."""
    get = getattr(sess, "get_provider_graph_assignment_info", None)
    if get is None:
        return []
    try:
        subgraphs = get()
    except Exception:  # noqa: BLE001 - recording not supported by this build: the assignment is unknown
        return []
    out: dict[str, list[dict]] = {}
    for sub in subgraphs:
        out.setdefault(sub.ep_name, []).extend({"name": n.name, "op_type": n.op_type} for n in sub.get_nodes())
    return [{"provider": ep, "nodes": nodes} for ep, nodes in out.items()]


def qdq_dtypes(model) -> tuple[Counter, list[str]]:
    """Q/DQ node counts by ``op:dtype`` (the quantized side's type: the zero point's, else the DQ's constant
    input's, else int8/uint8 unknown) and the names of the DequantizeLinear nodes that take int32 (quantized
    biases)."""
    from onnx import TensorProto

    types = {t.name: t.data_type for t in model.graph.initializer}
    q_out = {}
    for n in model.graph.node:
        if n.op_type == "QuantizeLinear" and len(n.input) > 2:
            q_out[n.output[0]] = types.get(n.input[2])
    counts: Counter = Counter()
    int32: list[str] = []
    for i, n in enumerate(model.graph.node):
        if n.op_type not in QDQ:
            continue
        dt = types.get(n.input[2]) if len(n.input) > 2 and n.input[2] else None
        if dt is None and n.op_type == "DequantizeLinear":
            dt = types.get(n.input[0]) or q_out.get(n.input[0])
        name = TensorProto.DataType.Name(dt).lower() if dt else ("uint8" if n.op_type == "QuantizeLinear" else "unknown")
        counts[f"{n.op_type}:{name}"] += 1
        if n.op_type == "DequantizeLinear" and name == "int32":
            int32.append(n.name or f"DequantizeLinear#{i}")
    return counts, int32


def summarize(model, assigned: list[dict], *, level: str, disabled: list[str], provider: str) -> dict:
    """The as-loaded facts: op-type counts, Q/DQ by dtype, int32 DQs, nodes per provider."""
    counts, int32 = qdq_dtypes(model)
    ops = Counter(n.op_type for n in model.graph.node)
    return {
        "runtime": "onnxruntime",
        "graph": (f"the graph {provider} is offered: ONNX Runtime's optimizations at {level}" if provider != CPU
                  else f"the CPU provider's graph at {level}"),
        "optimization_level": level,
        "disabled_optimizers": list(disabled),
        "nodes": len(model.graph.node),
        "op_types": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "qdq_by_dtype": dict(sorted(counts.items())),
        "int32_dq": int32,
        "nodes_per_provider": {row["provider"]: len(row["nodes"]) for row in assigned},
        "assignment_checked_with": CPU,
    }


def as_loaded(artifact_dir: str | Path, manifest: dict, out_path: str | Path | None = None, *,
              disabled_optimizers: list[str] | None = None) -> tuple[dict, object]:
    """The artifact's graph as ONNX Runtime loads it (written to ``out_path``, else a temporary file) and its summary."""
    runtime = manifest["runtime"]
    settings = dict(runtime.get("settings") or {})
    model_path = Path(artifact_dir) / runtime["model"]
    disabled = list(settings.get("disabled_optimizers") or ()) if disabled_optimizers is None else disabled_optimizers
    with tempfile.TemporaryDirectory(prefix="edgeopt-loaded-") as tmp:
        target = Path(out_path) if out_path else Path(tmp) / "model.loaded.onnx"
        model, assigned = optimized_model(model_path, settings, target, disabled_optimizers=disabled)
    facts = summarize(model, assigned, level=loaded_level(settings), disabled=disabled,
                      provider=settings.get("provider") or CPU)
    if out_path:
        facts["written"] = str(out_path)
    return facts, model
