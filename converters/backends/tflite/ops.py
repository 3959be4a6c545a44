"""A ``.tflite``'s ops read from its flatbuffer (with ai-edge-quantizer's reader), each judged quantized, float
or quantize/dequantize: what ``unit_count.py`` counts a TFLite model's units with (for
:func:`edgeopt.quant_units.units_of`), and the TFLite quantizer's per-op breakdown."""

from __future__ import annotations

from pathlib import Path
from typing import Any

_INT_TYPES = {3, 7, 9}  # flatbuffer TensorType UINT8, INT16, INT8
_FLOAT_TYPES = {0, 1}  # FLOAT32, FLOAT16
_QDQ = {6, 114}  # BuiltinOperator DEQUANTIZE, QUANTIZE


def op_scope(sg, op) -> str:
    """ai-edge-quantizer's name of an op: its output tensor names joined by ';', with a trailing ';'."""
    names = [_name(sg.tensors[i]) for i in op.outputs if i >= 0]
    names = [n for n in names if n]
    return ";".join(names) + ";" if names else ""


def _name(tensor) -> str:
    n = tensor.name
    return n.decode() if isinstance(n, bytes) else str(n or "")


def read_ops(path: Path) -> tuple[Any, list[dict]]:
    """(model, ops of the main subgraph): see :func:`subgraph_ops`."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as fu

    model = fu.read_model(Path(path).read_bytes())
    return model, subgraph_ops(model, 0)


def subgraph_ops(model, subgraph: int) -> list[dict]:
    """Each op of one subgraph: index, type name, scope, inputs, outputs, whether it is a quantize/dequantize op."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as fu

    sg = model.subgraphs[subgraph]
    ops = []
    for i, op in enumerate(sg.operators):
        code = model.operatorCodes[op.opcodeIndex]
        builtin = max(int(code.builtinCode), int(getattr(code, "deprecatedBuiltinCode", 0) or 0))
        kind = fu.TFL_OP_CODE_TO_NAME.get(builtin)
        ops.append({"index": i, "type": str(getattr(kind, "value", kind) or f"op{builtin}"), "scope": op_scope(sg, op),
                    "inputs": [int(t) for t in op.inputs if t >= 0], "outputs": [int(t) for t in op.outputs if t >= 0],
                    "qdq": builtin in _QDQ})
    return ops


def judged_ops(path: Path):
    """Each op of every subgraph (a recurrent layer's WHILE body included) with its verdict: "qdq" (a
    quantize/dequantize op), "quantized" (computes on 8-bit data, or reads INT8 weights through a DEQUANTIZE:
    weight-only), "float", or None (no float or 8-bit tensor). Returns (subgraph count, [(op, verdict), ...])."""
    model, _ = read_ops(path)
    judged = []
    for k, sg in enumerate(model.subgraphs):
        ops, tensors = subgraph_ops(model, k), sg.tensors
        dequantized = {t for op in ops if op["qdq"] for t in op["outputs"]  # INT8 weights (weight-only mode)
                       if any(int(tensors[i].type) in _INT_TYPES and is_constant(model, tensors[i]) for i in op["inputs"])}
        for op in ops:
            types = {int(tensors[t].type) for t in op["inputs"] + op["outputs"]}
            verdict = ("qdq" if op["qdq"] else "quantized" if types & _INT_TYPES or dequantized & set(op["inputs"])
                       else "float" if types & _FLOAT_TYPES else None)
            judged.append((op, verdict))
    return len(model.subgraphs), judged


def op_counts(path: Path) -> dict:
    """Ops that compute on 8-bit data or read INT8 weights vs those that stay float, every subgraph;
    quantize/dequantize ops are counted apart (:func:`judged_ops`)."""
    subgraphs, judged = judged_ops(path)
    count = {v: sum(1 for _, got in judged if got == v) for v in ("quantized", "float", "qdq")}
    return {"quantized_ops": count["quantized"], "float_ops": count["float"], "quantize_dequantize_ops": count["qdq"],
            "subgraphs": subgraphs}


def unit_counts(path: Path, units: set[str]) -> tuple[int, int]:
    """(quantized, total) compute units (ops whose type is in ``units``), judged as :func:`judged_ops` does."""
    verdicts = [v for op, v in judged_ops(path)[1] if op["type"].upper() in units]
    return sum(v == "quantized" for v in verdicts), len(verdicts)


def is_constant(model, tensor) -> bool:
    buf = model.buffers[tensor.buffer] if 0 < tensor.buffer < len(model.buffers) else None
    return buf is not None and (buf.data is not None and len(buf.data) > 0 or bool(getattr(buf, "size", 0)))
