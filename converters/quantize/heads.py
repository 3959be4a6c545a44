"""A model's output heads: the last weighted ops before its outputs, and the data-movement ops between them; and
the INT8 searches' option that keeps them in float.

A detector's outputs are often several branches' results reshaped and concatenated (BlazeFace: two feature
scales' score convolutions into one ``[1,896,1]`` output). Quantized, the concatenation has one scale for all its
inputs, and the widest branch sets it: BlazeFace's coarse-scale scores reach -7650 on some images while the
decisions sit near 0, so every score became the same step (a constant logit 0). Kept in float, each head's
convolution reads INT8 features and writes float results, and the rest of the network stays INT8.

The walk (:func:`heads_of`) knows no backend: each backend describes its own graph as :class:`GraphOp`\\ s (ONNX
nodes here, OpenVINO ops, TFLite ops), so the heads are named as that backend's quantizer excludes ops.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from edgeopt.enums import StrEnum

WEIGHTED = ("Conv", "ConvTranspose", "MatMul", "Gemm")
# ops that move or regroup values without computing new ones: walked through from an output to its heads
MOVES = ("Reshape", "Transpose", "Concat", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Slice", "Split",
         "Gather", "Expand", "Tile")


class OpRole(StrEnum):
    """What an op is to the walk from the outputs: where it stops, or what it walks through."""

    WEIGHTED = "weighted"  # a head: the walk stops here
    MOVE = "move"  # moves or regroups values: walked through
    BIAS = "bias"  # an Add of a constant: walked through
    OTHER = "other"  # computes: the walk ends there


@dataclass(frozen=True)
class GraphOp:
    """One op of a backend's graph as the walk sees it: its name (as the backend's quantizer excludes ops), its
    role, the tensors it reads that are not constants, and the tensors it writes."""

    name: str
    role: OpRole
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]


def heads_of(ops: Iterable[GraphOp], outputs: Iterable[str]) -> tuple[str, ...]:
    """The names of the ops from each output tensor back to the first weighted op on every path, through moves and
    bias adds only; a path meeting another op ends there (the moves on it still listed). Empty when no path reaches
    a weighted op. Unnamed ops are left out (the quantizers exclude ops by name)."""
    ops = list(ops)
    producer = {t: op for op in ops for t in op.outputs}
    found: dict[str, None] = {}
    seen: set[int] = set()
    stack = list(outputs)
    reached = False
    while stack:
        op = producer.get(stack.pop())
        if op is None or id(op) in seen:
            continue
        seen.add(id(op))
        if op.role == OpRole.WEIGHTED:
            found[op.name] = None
            reached = reached or bool(op.name)
        elif op.role in (OpRole.MOVE, OpRole.BIAS):
            found[op.name] = None
            stack += list(op.inputs)
    return tuple(n for n in found if n) if reached else ()


def onnx_ops(model) -> list[GraphOp]:
    """An ONNX graph's nodes as :class:`GraphOp`\\ s."""
    g = model.graph
    consts = {t.name for t in g.initializer} | {o for n in g.node if n.op_type == "Constant" for o in n.output}

    def role(n) -> OpRole:
        if n.op_type in WEIGHTED:
            return OpRole.WEIGHTED
        if n.op_type in MOVES:
            return OpRole.MOVE
        return OpRole.BIAS if n.op_type == "Add" and any(i in consts for i in n.input) else OpRole.OTHER

    return [GraphOp(n.name, role(n), tuple(i for i in n.input if i and i not in consts), tuple(n.output))
            for n in g.node]


def output_heads(model) -> tuple[str, ...]:
    """The output heads (:func:`heads_of`) of an ONNX model, by node name."""
    return heads_of(onnx_ops(model), [o.name for o in model.graph.output])


def multi_output_heads(model) -> tuple[str, ...]:
    """The output heads of an ONNX model with several outputs (a detector's scores and boxes), for the searches'
    heads-in-float option; () for a one-output model, whose search is unchanged."""
    return output_heads(model) if len(model.graph.output) > 1 else ()


@dataclass(frozen=True)
class HeadsOption:
    """The INT8 searches' option for a model with several outputs (:func:`.strategy.with_heads_option`): its output
    heads (``heads``, in the backend's op names) in float, and what else the backend's quantizer does with it:
    depthwise -> pointwise pairs equalized (:mod:`.equalize`), activation ranges averaged over the calibration
    batches rather than their extremes (``moving_average``). The label says exactly that."""

    heads: tuple[str, ...]
    equalized: bool = False
    moving_average: bool = False

    def label(self) -> str:
        parts = ["output heads in float"]
        if self.equalized:
            parts.append("depthwise pairs equalized")
        if self.moving_average:
            parts.append("moving-average calibration")
        return ", ".join(parts)
