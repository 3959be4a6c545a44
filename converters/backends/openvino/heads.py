"""An OpenVINO model's output heads (:mod:`edgeopt.converters.quantize.heads`), by the ops' friendly names, which
NNCF's ``ignored_scope`` takes."""

from __future__ import annotations

from edgeopt.converters.quantize.heads import GraphOp, OpRole, heads_of

WEIGHTED = {"Convolution", "GroupConvolution", "ConvolutionBackpropData", "GroupConvolutionBackpropData", "MatMul"}
MOVES = {"Reshape", "Transpose", "Concat", "Squeeze", "Unsqueeze", "StridedSlice", "Slice", "Split", "VariadicSplit",
         "Gather", "Broadcast", "Tile"}
CONSTANT_MAKERS = {"Constant", "Convert"}  # a Convert of a Constant is a compressed weight's decompression


def _tensor(output) -> str:
    return f"{output.get_node().get_friendly_name()}:{output.get_index()}"


def graph_ops(ov_model) -> list[GraphOp]:
    """``ov_model``'s ops as :class:`GraphOp`\\ s: a Constant (or a Convert of one) is no input."""
    def constant(out) -> bool:
        node = out.get_node()
        return node.get_type_name() == "Constant" or (
            node.get_type_name() in CONSTANT_MAKERS and all(constant(i.get_source_output()) for i in node.inputs()))

    ops = []
    for op in ov_model.get_ordered_ops():
        kind = op.get_type_name()
        ins = [i.get_source_output() for i in op.inputs()]
        role = (OpRole.WEIGHTED if kind in WEIGHTED else OpRole.MOVE if kind in MOVES else
                OpRole.BIAS if kind == "Add" and any(constant(i) for i in ins) else OpRole.OTHER)
        ops.append(GraphOp(op.get_friendly_name(), role, tuple(_tensor(i) for i in ins if not constant(i)),
                           tuple(_tensor(o) for o in op.outputs())))
    return ops


def output_heads(ov_model) -> tuple[str, ...]:
    """The output heads of an OpenVINO model with several outputs; () for a one-output model."""
    results = ov_model.get_results()
    if len(results) < 2:
        return ()
    return heads_of(graph_ops(ov_model), [_tensor(r.input(0).get_source_output()) for r in results])
