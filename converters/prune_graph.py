"""Graph analysis for structured channel pruning: which Conv output channels can go, and what else must change.

A *channel group* is a set of tensors that share one channel index space (axis 1, NCHW). It starts at
the output of a plain Conv (``group == 1``, constant weight) and grows through ops that keep channels
apart: BatchNormalization/InstanceNormalization, elementwise activations, pooling, elementwise ops with
a per-channel or scalar constant, depthwise Convs (``group == channels``), and elementwise ops with two
dynamic inputs (a residual ``Add``, a squeeze-excitation ``Mul``), which pull the other operand's
producers into the same group: those Convs then share one mask, from their summed, mean-normalised L1
norms. The group ends at consumers whose *input* channels shrink: a plain Conv, or Gemm/MatMul after
``Flatten`` (each channel there spans H×W columns). Anything else touching the group (graph outputs,
graph inputs, Concat, Reshape, Transpose, Split, Slice, Resize, grouped Convs, unknown shapes…) makes the
whole group unprunable, and every Conv in it is reported as skipped with the reason.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

UNARY = {
    "Relu", "LeakyRelu", "PRelu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "Tanh", "Elu", "Selu", "Celu",
    "Softplus", "Softsign", "Gelu", "Mish", "Identity", "Dropout", "Neg", "Abs", "Exp", "Log", "Sqrt", "Erf",
    "Reciprocal", "ThresholdedRelu", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool",
    "GlobalLpPool", "Cast",
}
BINARY = {"Add", "Sub", "Mul", "Div", "Max", "Min", "Sum", "Pow"}
PER_CHANNEL = {"BatchNormalization": (1, 2, 3, 4), "InstanceNormalization": (1, 2)}


@dataclass(frozen=True)
class Edit:
    """Slice input ``input_index`` of node ``node`` (an initializer) along ``axis``.

    ``block``: each channel spans that many consecutive entries (Flatten of C×H×W: block = H×W).
    """

    node: int
    input_index: int
    axis: int
    block: int = 1


@dataclass
class ChannelGroup:
    channels: int
    root: int  # the Conv the group was found from
    producers: list[int] = field(default_factory=list)  # Conv nodes whose output channels are removed
    edits: list[Edit] = field(default_factory=list)
    depthwise: list[int] = field(default_factory=list)  # Convs whose ``group`` attribute becomes the kept count
    consumers: list[int] = field(default_factory=list)  # nodes whose input channels shrink
    members: list[int] = field(default_factory=list)  # every node touched (for the skip list)
    tensors: set[str] = field(default_factory=set)
    unsafe: str | None = None


class GraphIndex:
    """Producers, consumers, constants and inferred shapes of one ONNX graph."""

    def __init__(self, model):
        import onnx
        from onnx import numpy_helper

        g = model.graph
        self.model = model
        self.nodes = list(g.node)
        self.inits = {i.name: i for i in g.initializer}
        self.consts: dict[str, np.ndarray] = {}
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[tuple[int, int]]] = defaultdict(list)
        self.uses: dict[str, int] = defaultdict(int)
        for i, node in enumerate(self.nodes):
            for out in node.output:
                if out:
                    self.producer[out] = i
            for j, inp in enumerate(node.input):
                if inp:
                    self.consumers[inp].append((i, j))
                    self.uses[inp] += 1
            if node.op_type == "Constant":
                for a in node.attribute:
                    if a.name == "value":
                        self.consts[node.output[0]] = numpy_helper.to_array(a.t)
        self.graph_outputs = {o.name for o in g.output}
        self.graph_inputs = {i.name for i in g.input if i.name not in self.inits}
        self.subgraph_names = _names_used_in_subgraphs(g)
        try:
            inferred = onnx.shape_inference.infer_shapes(model)
        except Exception:  # noqa: BLE001 - no shapes means nothing is provably safe
            inferred = model
        self.shapes: dict[str, tuple] = {}
        for vi in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]:
            t = vi.type.tensor_type
            if t.HasField("shape"):
                self.shapes[vi.name] = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
        for name, init in self.inits.items():
            self.shapes[name] = tuple(init.dims)

    def name(self, i: int) -> str:
        n = self.nodes[i]
        return n.name or f"{n.op_type}#{i}"

    def init_array(self, name: str) -> np.ndarray | None:
        from onnx import numpy_helper

        return numpy_helper.to_array(self.inits[name]) if name in self.inits else None

    def const(self, name: str) -> np.ndarray | None:
        if name in self.inits:
            return self.init_array(name)
        return self.consts.get(name)

    def attr(self, i: int, key: str, default=None):
        import onnx

        for a in self.nodes[i].attribute:
            if a.name == key:
                return onnx.helper.get_attribute_value(a)
        return default

    def conv_kind(self, i: int) -> str | None:
        """'plain' (group 1), 'depthwise' (group == channels, multiplier 1), or None (other/unknown)."""
        node = self.nodes[i]
        if node.op_type != "Conv" or len(node.input) < 2 or node.input[1] not in self.inits:
            return None
        if len(node.input) > 2 and node.input[2] and node.input[2] not in self.inits:
            return None
        w = self.shapes[node.input[1]]
        group = int(self.attr(i, "group", 1))
        if group == 1:
            return "plain"
        if w[1] == 1 and w[0] == group:
            return "depthwise"
        return None


def _names_used_in_subgraphs(graph) -> set[str]:
    names: set[str] = set()
    for node in graph.node:
        for a in node.attribute:
            subs = list(a.graphs) + ([a.g] if a.HasField("g") else [])
            for sg in subs:
                for n in sg.node:
                    names.update(n.input)
                names |= _names_used_in_subgraphs(sg)
    return names


def find_groups(ix: GraphIndex) -> list[ChannelGroup]:
    """Every channel group rooted at a plain Conv, each either prunable or with its reason not to be."""
    groups: list[ChannelGroup] = []
    assigned: set[str] = set()
    for i, node in enumerate(ix.nodes):
        if node.op_type != "Conv" or node.output[0] in assigned:
            continue
        if ix.conv_kind(i) != "plain":
            continue
        grp = _flood(ix, i)
        assigned |= grp.tensors
        groups.append(grp)
    return groups


def _flood(ix: GraphIndex, start: int) -> ChannelGroup:
    channels = ix.shapes[ix.nodes[start].input[1]][0]
    grp = ChannelGroup(channels=channels, root=start)
    queue = [ix.nodes[start].output[0]]
    done: set[tuple[int, str]] = set()  # (node, role)

    def fail(reason: str) -> None:
        if grp.unsafe is None:
            grp.unsafe = reason

    while queue and grp.unsafe is None:
        t = queue.pop()
        if t in grp.tensors:
            continue
        grp.tensors.add(t)
        shape = ix.shapes.get(t)
        if not shape or len(shape) < 2 or shape[1] != channels:
            fail(f"tensor '{t}' has unknown or different channel count ({shape})")
            break
        if t in ix.graph_outputs:
            fail(f"channels reach graph output '{t}'")
            break
        if t in ix.subgraph_names or t in ix.graph_inputs:
            fail(f"channels meet graph input or subgraph at '{t}'")
            break
        p = ix.producer.get(t)
        if p is None:
            fail(f"tensor '{t}' has no producer node")
            break
        key = (p, "out" if ix.conv_kind(p) == "plain" else "any")  # a plain Conv has two roles; others one
        if key not in done:
            done.add(key)
            queue += _visit(ix, grp, p, t, fail, from_output=True)
        for c, _ in ix.consumers.get(t, []):
            key = (c, "in" if ix.conv_kind(c) == "plain" else "any")
            if key not in done:
                done.add(key)
                queue += _visit(ix, grp, c, t, fail, from_output=False)
    return grp


def _visit(ix: GraphIndex, grp: ChannelGroup, i: int, t: str, fail, *, from_output: bool) -> list[str]:
    """Handle node ``i`` reached through tensor ``t``; returns tensors that join the group."""
    node, op, C = ix.nodes[i], ix.nodes[i].op_type, grp.channels
    where = f"{op} node '{ix.name(i)}'"
    grp.members.append(i)
    if op == "Conv":
        kind = ix.conv_kind(i)
        has_bias = len(node.input) > 2 and bool(node.input[2])
        if kind == "depthwise" and (from_output or node.input[0] == t):
            if i not in grp.depthwise:
                grp.depthwise.append(i)
                grp.edits.append(Edit(i, 1, 0))
                if has_bias:
                    grp.edits.append(Edit(i, 2, 0))
            return [node.input[0], node.output[0]]
        if kind == "plain" and from_output:
            grp.producers.append(i)
            grp.edits.append(Edit(i, 1, 0))
            if has_bias:
                grp.edits.append(Edit(i, 2, 0))
            return []
        if kind == "plain" and node.input[0] == t:
            grp.consumers.append(i)
            grp.edits.append(Edit(i, 1, 1))
            return []
        fail(f"channels {'come from' if from_output else 'feed'} {where} (grouped, non-constant weights or weight input)")
        return []
    if op in PER_CHANNEL:
        if node.input[0] != t and node.output[0] != t:
            fail(f"channels feed a parameter of {where}")
            return []
        if any(o and ix.uses.get(o) for o in node.output[1:]):
            fail(f"{where} has extra outputs in use")
            return []
        for j in PER_CHANNEL[op]:
            if j >= len(node.input) or node.input[j] not in ix.inits:
                fail(f"{where} has non-constant parameters")
                return []
            grp.edits.append(Edit(i, j, 0))
        return [node.input[0], node.output[0]]
    if op in UNARY or op in BINARY:
        if op in UNARY and node.input[0] != t and node.output[0] != t:
            fail(f"channels feed a parameter of {where}")
            return []
        if any(o and ix.uses.get(o) for o in node.output[1:]) or len(node.output) > 1 and node.output[1] in ix.graph_outputs:
            fail(f"{where} has extra outputs in use")
            return []
        joined = [node.output[0]]
        rank = len(ix.shapes.get(node.output[0]) or ix.shapes.get(t) or ())
        operands = node.input if op in BINARY or op == "PRelu" else node.input[:1]
        for j, name in enumerate(node.input):
            if not name:
                continue
            if j > 0 and name not in operands:  # Clip min/max and the like: must be constants
                if ix.const(name) is None:
                    fail(f"{where} has a non-constant input '{name}'")
                    return []
                continue
            value = ix.const(name)
            if value is None:
                shape = ix.shapes.get(name)
                if shape and len(shape) >= 2 and shape[1] == 1 and len(shape) == rank and C != 1:
                    continue  # broadcast over channels (e.g. a spatial attention map): channel-agnostic
                joined.append(name)
                continue
            axis = 1 - (rank - value.ndim)
            if axis < 0 or value.shape[axis] == 1:
                continue  # scalar or broadcast over channels
            if value.shape[axis] != C or name not in ix.inits:
                fail(f"{where} has a constant of shape {list(value.shape)} that cannot be sliced")
                return []
            grp.edits.append(Edit(i, j, axis))
        return joined
    if op == "Flatten" and node.input[0] == t:
        return _flatten_consumers(ix, grp, i, t, fail)
    fail(f"channels {'come from' if from_output else 'feed'} {where}")
    return []


def _flatten_consumers(ix: GraphIndex, grp: ChannelGroup, i: int, t: str, fail) -> list[str]:
    node = ix.nodes[i]
    shape = ix.shapes.get(t) or ()
    if int(ix.attr(i, "axis", 1)) != 1 or any(not isinstance(d, int) or d <= 0 for d in shape[2:]):
        fail(f"Flatten node '{ix.name(i)}' has axis != 1 or unknown spatial size")
        return []
    block = int(np.prod(shape[2:])) if len(shape) > 2 else 1
    out = node.output[0]
    if out in ix.graph_outputs or out in ix.subgraph_names:
        fail(f"Flatten node '{ix.name(i)}' output is a graph output")
        return []
    for c, j in ix.consumers.get(out, []):
        cn = ix.nodes[c]
        ok = j == 0 and len(cn.input) > 1 and cn.input[1] in ix.inits
        if cn.op_type == "Gemm" and ok and not ix.attr(c, "transA", 0):
            grp.edits.append(Edit(c, 1, 1 if ix.attr(c, "transB", 0) else 0, block))
        elif cn.op_type == "MatMul" and ok and len(ix.shapes[cn.input[1]]) == 2:
            grp.edits.append(Edit(c, 1, 0, block))
        else:
            fail(f"Flatten output feeds {cn.op_type} node '{ix.name(c)}'")
            return []
        grp.consumers.append(c)
        grp.members.append(c)
    grp.members.append(i)
    return []


def model_cost(model) -> dict:
    """FLOPs (2 × MACs of Conv, Gemm, MatMul; symbolic dims count as 1) and parameters (initializer elements)."""
    ix = GraphIndex(model)
    flops = 0
    for i, node in enumerate(ix.nodes):
        out = ix.shapes.get(node.output[0]) if node.output else None
        if not out:
            continue
        out_n = int(np.prod([d if isinstance(d, int) and d > 0 else 1 for d in out]))
        if node.op_type == "Conv":
            w = ix.shapes.get(node.input[1])
            if w:
                flops += 2 * out_n * int(np.prod(w[1:]))
        elif node.op_type in ("Gemm", "MatMul"):
            a = ix.shapes.get(node.input[0])
            if a:
                k = a[0] if node.op_type == "Gemm" and ix.attr(i, "transA", 0) else a[-1]
                flops += 2 * out_n * (k if isinstance(k, int) and k > 0 else 1)
    params = sum(int(np.prod(init.dims)) for init in model.graph.initializer)
    return {"flops": int(flops), "params": int(params)}
