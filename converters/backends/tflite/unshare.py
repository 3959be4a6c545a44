"""A weight read by ops kept in float and by ops to quantize, given the quantized ones a copy of their own.

onnx2tf keeps one constant for ops that apply the same kernel: Basic Pitch's constant-Q front end convolves each
octave with one filter bank, so 8 ``CONV_2D`` read one ``[36,1,256,1]`` filter and one bias. When a candidate
keeps some of those ops in float and quantizes the others, ai-edge-quantizer (0.10.0) duplicates the tensor under
a ``str`` name and then fails adding ``b'_dequant'`` to it (``TypeError: can only concatenate str (not "bytes")
to str``): every such candidate failed to build, and the search could only put the whole front end in float.

Before such a candidate is quantized, the ops it quantizes read a copy of the shared constant (the same values in
a buffer of its own, the name suffixed) and the ops it keeps in float the original: the same model, with nothing
left for the quantizer to duplicate. A candidate whose float ops share no constant with its quantized ones is
quantized from the model as it is.
"""

from __future__ import annotations

import copy
from pathlib import Path

from .ops import op_scope

# the ops whose constant inputs ai-edge-quantizer quantizes (their weights, and biases to int32)
WEIGHTED = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "EMBEDDING_LOOKUP",
            "BATCH_MATMUL")


def unshare_for(src: Path, out: Path, keep_float: tuple[str, ...]) -> bool:
    """Write ``src`` to ``out`` with each constant read both by an op in ``keep_float`` (op scopes) and by a
    weighted op outside it copied for the latter; False (nothing written) when there is no such constant."""
    from ai_edge_litert.tools import flatbuffer_utils
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as fu

    if not keep_float:
        return False
    kept = set(keep_float)
    model = fu.read_model(Path(src).read_bytes())
    weighted = {int(getattr(fu.qtyping.BuiltinOperator, name)) for name in WEIGHTED
                if hasattr(fu.qtyping.BuiltinOperator, name)}
    copies = 0
    for sg in model.subgraphs:
        float_read: set[int] = set()  # constants an op kept in float reads
        quantized: list[tuple[object, int, int]] = []  # (op, input position, tensor) of weighted ops to quantize
        for op in sg.operators:
            code = model.operatorCodes[op.opcodeIndex]
            builtin = max(int(code.builtinCode), int(getattr(code, "deprecatedBuiltinCode", 0) or 0))
            in_float = op_scope(sg, op) in kept
            for pos, t in enumerate(op.inputs):
                if t < 0 or not _constant(model, sg.tensors[t]):
                    continue
                if in_float:
                    float_read.add(t)
                elif builtin in weighted and pos > 0:
                    quantized.append((op, pos, t))
        made: dict[int, int] = {}  # shared constant -> the quantized ops' copy
        for op, pos, t in quantized:
            if t in float_read:
                if t not in made:
                    made[t] = _copy_of(model, sg, t, copies)
                    copies += 1
                op.inputs[pos] = made[t]
    if not copies:
        return False
    flatbuffer_utils.write_model(model, str(out))
    return True


def _constant(model, tensor) -> bool:
    data = model.buffers[tensor.buffer].data if tensor.buffer < len(model.buffers) else None
    return data is not None and len(data) > 0


def _copy_of(model, sg, t: int, k: int) -> int:
    """A new tensor with ``t``'s values in a buffer of its own; its index."""
    tensor = copy.deepcopy(sg.tensors[t])
    name = tensor.name if isinstance(tensor.name, bytes) else str(tensor.name or "").encode()
    tensor.name = name + f"_quantized_copy_{k}".encode()
    model.buffers.append(copy.deepcopy(model.buffers[tensor.buffer]))
    tensor.buffer = len(model.buffers) - 1
    sg.tensors.append(tensor)
    return len(sg.tensors) - 1
