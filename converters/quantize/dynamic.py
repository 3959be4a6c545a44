"""Dynamic INT8 (weights INT8, activations quantized at run time): only where it pays.

It pays for MatMul/Gemm/LSTM/GRU-heavy models on CPU (transformers, RNNs): their cost is in
weight bandwidth, and ORT has fused DynamicQuantizeMatMul/DynamicQuantizeLSTM kernels. On a CNN
it made the model ~10x slower than FP32 here (pitfalls.md): convolutions then run through
ConvInteger with a per-call activation quantization. So the decision comes from the op mix.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from edgeopt.deps import require
from edgeopt.errors import StageError

DYNAMIC_OPS = ("MatMul", "Gemm", "LSTM", "GRU", "Attention")
CONV_OPS = ("Conv", "ConvTranspose")


def _all_nodes(graph, inits: dict):
    """Nodes of ``graph`` and of its subgraphs (If/Loop/Scan bodies), collecting initializers on the way."""
    inits.update({i.name: int(np.prod(i.dims)) if len(i.dims) else 1 for i in graph.initializer})
    for node in graph.node:
        yield node
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                yield from _all_nodes(sub, inits)


def op_mix(model) -> dict:
    """Weight parameters per op family (initializers or Constants feeding each node, subgraphs included)."""
    inits: dict[str, int] = {}
    params = {"dynamic": 0, "conv": 0, "other": 0}
    nodes = {"dynamic": 0, "conv": 0}
    for node in _all_nodes(model.graph, inits):
        if node.op_type == "Constant":
            value = next((a.t for a in node.attribute if a.name == "value"), None)
            if value is not None:
                inits[node.output[0]] = int(np.prod(value.dims)) if len(value.dims) else 1
        w = sum(inits.get(i, 0) for i in node.input)
        if node.op_type in DYNAMIC_OPS:
            params["dynamic"] += w
            nodes["dynamic"] += 1
        elif node.op_type in CONV_OPS:
            params["conv"] += w
            nodes["conv"] += 1
        else:
            params["other"] += w
    total = max(1, params["dynamic"] + params["conv"])
    return {
        "weights_in_matmul_lstm_gru": params["dynamic"],
        "weights_in_conv": params["conv"],
        "matmul_lstm_gru_share": round(params["dynamic"] / total, 3),
        "nodes": nodes,
    }


def dynamic_decision(model) -> tuple[bool, str, dict]:
    """(pays, reason, op mix). Pays when ≥ 60 % of the weighted-op parameters are MatMul/Gemm/LSTM/GRU."""
    mix = op_mix(model)
    share = mix["matmul_lstm_gru_share"]
    if mix["nodes"]["dynamic"] == 0:
        return False, "the model has no MatMul/Gemm/LSTM/GRU nodes: dynamic INT8 quantizes nothing useful", mix
    if share >= 0.6:
        return True, (f"{share:.0%} of the weights are in MatMul/Gemm/LSTM/GRU nodes: weight-bound on CPU, "
                      "where dynamic INT8 pays"), mix
    n = mix["nodes"]
    return False, (f"a convolutional model ({n['conv']} Conv vs {n['dynamic']} MatMul/Gemm/LSTM/GRU nodes; {share:.0%} of "
                   "the weights found in MatMul/Gemm/LSTM/GRU): dynamic INT8 runs convolutions through ConvInteger "
                   "(~10x slower than FP32 on a CNN here) and gains nothing elsewhere: use static INT8"), mix


def quantize_dynamic(src: Path, dst: Path, per_channel: bool = False, nodes_to_exclude: tuple[str, ...] = ()) -> Path:
    q = require("onnxruntime.quantization", "dynamic INT8 quantization")
    tmp = dst.with_name(dst.stem + ".tmp.onnx")
    # ONNX Runtime's dynamic quantizer first rewrites each Gemm as a MatMul named '<gemm>_MatMul' (+ an Add) and
    # matches nodes_to_exclude on the rewritten graph: a Gemm kept in float is named both ways (MiniLM's 36 Gemms,
    # after normalize, stayed INT8 whatever was excluded)
    nodes_to_exclude = tuple(n for name in nodes_to_exclude for n in (name, f"{name}_MatMul"))
    try:
        q.quantize_dynamic(str(src), str(tmp), op_types_to_quantize=list(DYNAMIC_OPS), per_channel=per_channel,
                           weight_type=q.QuantType.QInt8, nodes_to_exclude=list(nodes_to_exclude) or None)
    except Exception as err:  # noqa: BLE001
        raise StageError(f"qdq: dynamic INT8 failed: {type(err).__name__}: {str(err)[:200]}",
                         "use static INT8 or --precision fp32") from err
    tmp.replace(dst)
    return dst
