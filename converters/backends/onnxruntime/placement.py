"""Placement of an ONNX Runtime artifact's nodes: asked of ONNX Runtime where the artifact's provider is in this
build (``get_provider_graph_assignment_info`` on the graph as loaded), else predicted for TensorRT/CUDA from
ONNX-TensorRT's op support and the int32-DequantizeLinear rule (``op_support.json``)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from edgeopt.placement import build_report, op_support, tensor_bytes

CPU = "CPUExecutionProvider"
TRT = "TensorrtExecutionProvider"
CUDA = "CUDAExecutionProvider"


def provider_unit(provider: str, target_unit: str) -> str:
    """The unit a provider runs on: the CPU provider on the cpu, any other on the profile's accelerator."""
    return "cpu" if provider == CPU else target_unit


def provider_assignment(model_path: str | Path, settings: dict, tmp: str) -> tuple[object, list[dict]] | None:
    """(as-loaded graph, ONNX Runtime's assignment) with the artifact's providers, where its provider is in this
    ONNX Runtime; None where it is not (the placement is then predicted)."""
    import onnxruntime as ort

    wanted = settings.get("provider") or CPU
    if wanted != CPU and wanted not in ort.get_available_providers():
        return None
    from edgeopt.runtime.runners.onnxruntime import open_session, session_options, session_providers

    from .as_loaded import assignment, loaded_level

    so = session_options(ort, {**settings, "graph_optimization_level": loaded_level(settings)})
    so.optimized_model_filepath = str(Path(tmp) / "placed.onnx")
    so.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    providers = session_providers(settings, ort.get_available_providers())
    sess = open_session(ort, str(model_path), so, providers, settings)  # the last session's graph is the one saved
    import onnx

    return onnx.load(str(Path(tmp) / "placed.onnx")), assignment(sess)


def predict_node(node, dq_dtype: str | None, settings: dict, table: dict) -> tuple[str, str | None]:
    """(provider, why) for one node under TensorRT with CUDA and the CPU behind it."""
    fallbacks = settings.get("fallback_providers") or ()
    if node.op_type == "DequantizeLinear" and dq_dtype == "int32":
        return CPU, "int32 DequantizeLinear: TensorRT's parser rejects it and CUDA has no kernel for it"
    if node.domain not in ("", "ai.onnx"):
        return CPU, f"a {node.domain} contrib op: not an ONNX op TensorRT parses"
    if node.op_type in table["tensorrt"]["unsupported"]:
        return (CUDA if CUDA in fallbacks else CPU), "not supported by ONNX-TensorRT (operators.md)"
    return TRT, None


def predicted(model, settings: dict) -> list[dict]:
    """Each node's predicted provider under TensorRT (the artifact's provider) from the published tables."""
    from .as_loaded import qdq_dtypes

    _, int32 = qdq_dtypes(model)
    table = op_support()
    wanted = settings.get("provider") or CPU
    rows = []
    for i, n in enumerate(model.graph.node):
        name = n.name or f"{n.op_type}#{i}"
        if wanted == TRT:
            engine, why = predict_node(n, "int32" if name in int32 else None, settings, table)
        elif wanted == CUDA:
            engine, why = (CPU, "int32 DequantizeLinear: CUDA has no kernel for it") if name in int32 else (CUDA, None)
        else:
            engine, why = wanted, None
        rows.append({"name": name, "op_type": n.op_type, "engine": engine, "why": why,
                     "inputs": list(n.input), "outputs": list(n.output)})
    return rows


def ort_placement(model_path: str | Path, settings: dict, *, target_unit: str, bandwidth_gbps: float | None,
                  assigned_by=None) -> dict:
    """The placement report of ``model_path`` loaded with ``settings`` (an artifact's ``runtime.settings``).
    ``assigned_by``: a stand-in for :func:`provider_assignment` (tests)."""
    from .as_loaded import optimized_model

    wanted = settings.get("provider") or CPU
    with tempfile.TemporaryDirectory(prefix="edgeopt-place-") as tmp:
        got = (assigned_by or provider_assignment)(model_path, settings, tmp)
        if got is not None and got[1]:
            model, assigned = got
            where = {n["name"]: row["provider"] for row in assigned for n in row["nodes"]}
            rows = [{"name": n.name or f"{n.op_type}#{i}", "op_type": n.op_type,
                     "engine": where.get(n.name, CPU), "why": None if where.get(n.name, CPU) == wanted
                     else "ONNX Runtime assigned it here", "inputs": list(n.input), "outputs": list(n.output)}
                    for i, n in enumerate(model.graph.node)]
            source, how = "runtime", "ONNX Runtime's node assignment (get_provider_graph_assignment_info)"
        else:
            model, _ = optimized_model(model_path, settings, Path(tmp) / "loaded.onnx")
            rows = predicted(model, settings)
            source = "predicted"
            how = (f"{wanted} is not in this ONNX Runtime: predicted from ONNX-TensorRT's op support and the "
                   "int32-DequantizeLinear rule on the graph as loaded (op_support.json)")
        for r in rows:
            r["unit"] = provider_unit(r["engine"], target_unit)
        # the loaded graph's contrib ops (Memcpy) stop shape inference: the artifact's own shapes fill in
        sizes = {**tensor_bytes(_load(model_path)), **{k: v for k, v in tensor_bytes(model).items() if v}}
        return build_report(rows, target_unit=target_unit if wanted != CPU else "cpu", target=wanted,
                            source=source, how=how, sizes=sizes, bandwidth_gbps=bandwidth_gbps)


def _load(path: str | Path):
    import onnx

    return onnx.load(str(path))
