"""The activation arena of a graph: tensor lifetimes over the ONNX nodes in order, laid out greedy by size.

This is the offline planner TensorFlow Lite Micro (``GreedyMemoryPlanner``) and ExecuTorch use: the largest
tensor first, each at the lowest offset where it overlaps no tensor placed before whose lifetime meets its
own. The arena is the highest end offset. ``live_bytes`` is, per node, the bytes of the tensors alive while
it runs (the lower bound any planner meets).
"""

from __future__ import annotations

from dataclasses import dataclass

ALIGN = 16  # TFLM aligns each tensor's buffer to 16 bytes


@dataclass(frozen=True)
class Buffer:
    name: str
    size: int
    first: int  # index of the node that writes it (-1: a graph input)
    last: int  # index of the last node that reads it (len(nodes): a graph output)


@dataclass(frozen=True)
class ArenaPlan:
    arena_bytes: int
    offsets: dict[str, int]
    live_bytes: list[int]  # per node
    node_names: list[str]
    buffers: int = 0  # activation buffers laid out (an in-place op's output shares its input's)
    in_place: int = 0  # ops whose output took their input's buffer (fused into the op before, or views)


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


# Ops whose output can take its input's buffer when nothing else reads that input: activations a converter
# fuses into the op before (TFLite's fused ReLU/ReLU6), batch norm folded into the conv, and views.
IN_PLACE = frozenset({"Relu", "Clip", "LeakyRelu", "BatchNormalization", "Identity", "Reshape", "Flatten",
                      "Squeeze", "Unsqueeze", "Dropout"})


def _aliases(graph, sizes: dict[str, int]) -> dict[str, str]:
    """output -> the tensor whose buffer it reuses (in-place ops on a tensor read by that op alone)."""
    readers: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    outputs = {o.name for o in graph.output}
    alias: dict[str, str] = {}
    for node in graph.node:
        if node.op_type not in IN_PLACE or not node.input or not node.output:
            continue
        src = alias.get(node.input[0], node.input[0])
        if readers.get(node.input[0]) == 1 and node.input[0] not in outputs and \
                sizes.get(node.output[0], 0) <= sizes.get(node.input[0], 0):
            alias[node.output[0]] = src
    return alias


def lifetimes(graph, sizes: dict[str, int]) -> list[Buffer]:
    """Each non-constant tensor's (first, last) node index; ``sizes``: bytes of each tensor (unknown: absent).
    An in-place op's output extends its input's buffer instead of taking one of its own (:data:`IN_PLACE`)."""
    consts = {i.name for i in graph.initializer}
    consts |= {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    alias = _aliases(graph, sizes)
    first: dict[str, int] = {i.name: -1 for i in graph.input if i.name not in consts}
    last: dict[str, int] = dict(first)
    for k, node in enumerate(graph.node):
        if node.op_type == "Constant":
            continue
        for name in node.input:
            name = alias.get(name, name)
            if name in first:
                last[name] = k
        for name in node.output:
            if name and name in alias:
                last[alias[name]] = k
            elif name:
                first.setdefault(name, k)
                last.setdefault(name, k)
    end = len(graph.node)
    for o in graph.output:
        name = alias.get(o.name, o.name)
        if name in last:
            last[name] = end
    return [Buffer(n, _aligned(sizes.get(n, 0)), first[n], last[n]) for n in first if sizes.get(n, 0) > 0]


def greedy_by_size(buffers: list[Buffer]) -> dict[str, int]:
    """Offsets: largest first, each at the lowest offset free of every placed buffer alive at the same time."""
    placed: list[tuple[int, Buffer]] = []
    offsets: dict[str, int] = {}
    for b in sorted(buffers, key=lambda b: (-b.size, b.first, b.name)):
        overlapping = sorted(((off, o) for off, o in placed if o.first <= b.last and b.first <= o.last),
                             key=lambda t: t[0])
        offset = 0
        for off, o in overlapping:
            if offset + b.size <= off:
                break
            offset = max(offset, off + o.size)
        offsets[b.name] = offset
        placed.append((offset, b))
    return offsets


def plan_arena(graph, sizes: dict[str, int]) -> ArenaPlan:
    """The greedy-by-size layout of ``graph``'s activations (sizes in bytes, as the runtime stores them)."""
    buffers = lifetimes(graph, sizes)
    offsets = greedy_by_size(buffers)
    arena = max((offsets[b.name] + b.size for b in buffers), default=0)
    live = [sum(b.size for b in buffers if b.first <= k <= b.last) for k in range(len(graph.node))]
    names = [n.name or f"{n.op_type}_{k}" for k, n in enumerate(graph.node)]
    return ArenaPlan(arena, offsets, live, names, len(buffers), len(_aliases(graph, sizes)))
