"""TensorRT's Q/DQ rules on the graph ONNX Runtime hands the TensorRT provider, not only on the file.

ONNX Runtime rewrites the graph when the session is created, before the providers split it: its
``WeightBiasQuantization`` optimizer gives each quantized Conv/Gemm with a float bias an int32-bias DequantizeLinear,
which TensorRT's parser rejects. The artifact's settings leave that optimizer off (``disabled_optimizers``); this
check loads the artifact with the runner's session options, writes the optimized graph and applies the same rules
as the file's check: an int32 DQ there fails the conversion (exit 5, naming the nodes).
"""

from __future__ import annotations

from pathlib import Path

LINEAR_OPS = ("Conv", "Gemm", "MatMul")
WEIGHT_BIAS_QUANTIZATION = "WeightBiasQuantization"  # ONNX Runtime's optimizer that makes int32-bias DQs


def float_layers(model, precision: str) -> dict:
    """The linear ops (Conv/Gemm/MatMul) whose data or weight does not come through a DequantizeLinear: TensorRT
    runs them in float, at ``precision`` (what they were judged at)."""
    producer = {out: n for n in model.graph.node for out in n.output}
    names = []
    for i, n in enumerate(model.graph.node):
        if n.op_type not in LINEAR_OPS or len(n.input) < 2:
            continue
        if not all(getattr(producer.get(x), "op_type", None) == "DequantizeLinear" for x in n.input[:2]):
            names.append(n.name or f"{n.op_type}#{i}")
    return {"precision": precision, "count": len(names), "nodes": names}


def check_as_loaded(model_path: str | Path, settings: dict) -> dict:
    """Load ``model_path`` as the runner does (``settings``: the artifact's ``runtime.settings``), check the graph the
    TensorRT provider is offered against TensorRT's Q/DQ rules; return the facts, raise ``GateFailedError`` (exit 5)
    naming the int32 DQs or other violations."""
    import tempfile

    from edgeopt.converters.backends.onnxruntime.tensorrt_qdq import check_tensorrt_qdq
    from edgeopt.errors import GateFailedError

    from .as_loaded import loaded_level, optimized_model, qdq_dtypes

    disabled = list(settings.get("disabled_optimizers") or ())
    with tempfile.TemporaryDirectory(prefix="edgeopt-loaded-") as tmp:
        model, _ = optimized_model(model_path, settings, Path(tmp) / "loaded.onnx")
    _, int32 = qdq_dtypes(model)
    report = check_tensorrt_qdq(model)
    facts = {"optimization_level": loaded_level(settings), "disabled_optimizers": disabled,
             "nodes": len(model.graph.node), "int32_dq": int32, "violations": len(report.violations),
             "passed": report.passed and not int32}
    if facts["passed"]:
        return facts
    named = ", ".join(int32[:5]) + (f" and {len(int32) - 5} more" if len(int32) > 5 else "")
    why = (f"{len(int32)} int32-bias DequantizeLinear node(s) ONNX Runtime inserts at load time ({named})" if int32
           else f"{report.summary()}")
    hint = (f"leave ONNX Runtime's {WEIGHT_BIAS_QUANTIZATION} optimizer off (runtime.settings.disabled_optimizers)"
            if int32 and WEIGHT_BIAS_QUANTIZATION not in disabled else
            "quantize with the tensorrt preset (biases float, symmetric signed INT8), or use --precision fp16")
    raise GateFailedError(f"onnxruntime: the graph the TensorRT provider receives breaks TensorRT's Q/DQ rules: "
                          f"{why}", hint, details={"tensorrt_qdq_as_loaded": facts})
