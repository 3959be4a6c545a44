"""Quantized compute units of a ``.tflite``: a unit, in any subgraph, that computes on int8/int16/uint8 tensors or
whose weights are 8-bit constants through a ``DEQUANTIZE`` (weight-only)."""

from __future__ import annotations

from pathlib import Path

UNITS = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "BATCH_MATMUL", "TRANSPOSE_CONV", "CONV_3D",
         "UNIDIRECTIONAL_SEQUENCE_LSTM", "BIDIRECTIONAL_SEQUENCE_LSTM", "LSTM", "UNIDIRECTIONAL_SEQUENCE_RNN"}
INT_TYPES = {"int8", "int16", "int4", "uint8"}


def tflite_units(path: Path) -> tuple[int, int]:
    """(quantized, total) units of every subgraph (onnx2tf puts a recurrent layer's cell in a WHILE body), read with
    ai-edge-quantizer's flatbuffer reader; without that library (the tflite extra), LiteRT's listing of the main
    subgraph."""
    try:
        from .ops import unit_counts

        return unit_counts(path, UNITS)
    except ImportError:
        return _main_subgraph_units(path)


def _main_subgraph_units(path: Path) -> tuple[int, int]:
    from edgeopt.runtime.runners.tflite import open_interpreter

    interp = open_interpreter(str(path))
    dtypes = {t["index"]: str(getattr(t["dtype"], "__name__", t["dtype"])) for t in interp.get_tensor_details()}
    quantized = total = 0
    for op in interp._get_ops_details():  # noqa: SLF001 - LiteRT's only listing of a model's ops
        if op["op_name"] not in UNITS:
            continue
        total += 1
        quantized += any(dtypes.get(int(i)) in INT_TYPES for i in op["inputs"] if int(i) >= 0)
    return quantized, total
