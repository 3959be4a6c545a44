"""How many of an artifact's compute units are quantized, read from the artifact's own model.

A unit is an op that does the model's arithmetic (convolutions, matrix products, recurrent cells). It counts
as quantized when it computes on integers or takes a (fake-)quantized input. ONNX (the chain's format) is counted
here: ``QLinearConv``/``QLinearMatMul``/``ConvInteger``/``MatMulInteger``/``DynamicQuantize*``/``QGemm``/
``MatMulNBits``; or a unit whose weights (input 1) come from a ``DequantizeLinear`` (QDQ), through layout ops.
Every other model file (by its suffix) or in-memory model is counted by the backend whose hooks claim it
(``BackendHooks.units``, each rule in its backend's ``unit_count.py``).

:func:`units_of` is the one count: each backend's quantizer reports it for what it wrote, and the validation
calls it (through :func:`count_units`) for every artifact; an artifact labelled ``int8`` with no quantized unit
fails its gate (``edgeopt.validate``). A compiled library no backend reads is not counted (None).
"""

from __future__ import annotations

from pathlib import Path

ONNX_UNITS = {"Conv", "ConvTranspose", "MatMul", "Gemm", "LSTM", "GRU", "RNN", "Einsum", "Attention"}
ONNX_INTEGER_UNITS = {"QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "DynamicQuantizeLSTM",
                      "DynamicQuantizeMatMul", "QGemm", "QAttention", "MatMulNBits", "MatMulIntegerToFloat"}
ONNX_PASS_THROUGH = {"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Cast"}
MAX_WALK = 6  # layout/convert ops walked back from a unit's input to its quantizer


def _counted_suffixes() -> set[str]:
    from edgeopt.converters.registry import backend_hooks

    return {".onnx", *(s for h in backend_hooks().values() for s in h.unit_suffixes)}


def count_units(artifact_dir, runtime: dict) -> dict | None:
    """``{"quantized": q, "float": f, "file": name}`` for the artifact's model named in ``runtime``
    (the manifest's ``runtime`` entry); None when the format is not read (a compiled library) or unreadable."""
    name = str(runtime.get("model") or "")
    path = Path(artifact_dir) / name
    if path.suffix.lower() not in _counted_suffixes() or not path.is_file():
        return None
    try:
        quantized, floating = units_of(path)
    except Exception:  # noqa: BLE001 - a count we can't make is said as "not counted", never a failure
        return None
    return {"quantized": quantized, "float": floating, "file": name}


def units_of(model) -> tuple[int, int]:
    """(quantized, float) units of one model: an ONNX file, a file or in-memory model a backend counts (an IR
    ``.xml``, a ``.tflite``, an OpenVINO ``Model`` the searches hold before writing); the quantizers report this
    count."""
    from edgeopt.converters.registry import backend_hooks

    if isinstance(model, (str, Path)) and Path(model).suffix.lower() == ".onnx":
        quantized, total = _onnx(Path(model))
    else:
        counts = next((c for h in backend_hooks().values() if (c := h.units(model)) is not None), None)
        if counts is None:
            what = Path(model).name if isinstance(model, (str, Path)) else type(model).__name__
            raise ValueError(f"no unit count for '{what}' (suffixes: {', '.join(sorted(_counted_suffixes()))})")
        quantized, total = counts
    return quantized, total - quantized


def _onnx(path: Path) -> tuple[int, int]:
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    producer = {out: n for n in graph.node for out in n.output}

    def dequantized(tensor: str, depth: int = 0) -> bool:
        node = producer.get(tensor)
        if node is None or depth > MAX_WALK:
            return False
        if node.op_type == "DequantizeLinear":
            return True
        return node.op_type in ONNX_PASS_THROUGH and bool(node.input) and dequantized(node.input[0], depth + 1)

    quantized = total = 0
    for n in graph.node:
        if n.op_type in ONNX_INTEGER_UNITS:
            quantized, total = quantized + 1, total + 1
        elif n.op_type in ONNX_UNITS:  # QDQ: quantized when its weights (input 1) come dequantized
            total += 1
            quantized += len(n.input) > 1 and dequantized(n.input[1])
    return quantized, total
