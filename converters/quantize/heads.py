"""A model's output heads: the last weighted ops before its outputs, and the data-movement ops between them.

A detector's outputs are often several branches' results reshaped and concatenated (BlazeFace: two feature
scales' score convolutions into one ``[1,896,1]`` output). Quantized, the concatenation has one scale for all its
inputs, and the widest branch sets it: BlazeFace's coarse-scale scores reach -7650 on some images while the
decisions sit near 0, so every score became the same step (a constant logit 0). Kept in float, each head's
convolution reads INT8 features and writes float results, and the rest of the network stays INT8.
"""

from __future__ import annotations

WEIGHTED = ("Conv", "ConvTranspose", "MatMul", "Gemm")
# ops that move or regroup values without computing new ones: walked through from an output to its heads
MOVES = ("Reshape", "Transpose", "Concat", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Slice", "Split",
         "Gather", "Expand", "Tile")


def output_heads(model) -> tuple[str, ...]:
    """The names of the nodes from each model output back to the first weighted op on every path, through
    :data:`MOVES` and bias ``Add``s (an Add with a constant input) only; a path meeting another op ends there
    (the moves on it still listed). Empty when no path reaches a weighted op. Unnamed nodes are left out (the
    quantizers exclude nodes by name)."""
    g = model.graph
    consts = {t.name for t in g.initializer} | {o for n in g.node if n.op_type == "Constant" for o in n.output}
    producer = {o: n for n in g.node for o in n.output}
    found: dict[str, None] = {}
    seen: set[int] = set()
    stack = [o.name for o in g.output]
    while stack:
        node = producer.get(stack.pop())
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        if node.op_type in WEIGHTED:
            found[node.name] = None
        elif node.op_type in MOVES or (node.op_type == "Add" and any(i in consts for i in node.input)):
            found[node.name] = None
            stack += [i for i in node.input if i and i not in consts]
    heads = [n for n in found if n]
    weighted = {n.name for n in g.node if n.op_type in WEIGHTED}
    return tuple(heads) if any(h in weighted for h in heads) else ()
