"""A float ``.tflite``'s output heads (:mod:`edgeopt.converters.quantize.heads`), by op scope, which the TFLite
quantizer's ``keep_float`` takes. onnx2tf names ops after its Keras layers, not the ONNX nodes, so the heads are
found on the ``.tflite`` itself."""

from __future__ import annotations

from pathlib import Path

from edgeopt.converters.quantize.heads import GraphOp, OpRole, heads_of

from .ops import is_constant, read_ops

WEIGHTED = {"CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "FULLY_CONNECTED", "BATCH_MATMUL", "CONV_3D"}
MOVES = {"RESHAPE", "TRANSPOSE", "CONCATENATION", "SQUEEZE", "EXPAND_DIMS", "STRIDED_SLICE", "SLICE", "SPLIT",
         "SPLIT_V", "GATHER", "PACK", "UNPACK", "TILE", "BROADCAST_TO"}


def graph_ops(path: Path) -> tuple[list[GraphOp], list[str]]:
    """The main subgraph's ops as :class:`GraphOp`\\ s (constant tensors are no inputs), and its output tensors."""
    model, ops = read_ops(path)
    sg = model.subgraphs[0]

    def const(t: int) -> bool:
        return is_constant(model, sg.tensors[t])

    out = []
    for op in ops:
        kind = op["type"].upper()
        role = (OpRole.WEIGHTED if kind in WEIGHTED else OpRole.MOVE if kind in MOVES else
                OpRole.BIAS if kind == "ADD" and any(const(t) for t in op["inputs"]) else OpRole.OTHER)
        out.append(GraphOp(op["scope"], role, tuple(str(t) for t in op["inputs"] if not const(t)),
                           tuple(str(t) for t in op["outputs"])))
    return out, [str(int(t)) for t in sg.outputs]


def output_heads(path: Path) -> tuple[str, ...]:
    """The output heads of a float ``.tflite`` with several outputs, by scope; () for a one-output model."""
    ops, outputs = graph_ops(path)
    return heads_of(ops, outputs) if len(outputs) > 1 else ()
