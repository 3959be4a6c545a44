"""Node names as onnx2tf can use them: TensorFlow scope names match ``[A-Za-z0-9_.\\/>-]*``.

onnx2tf names each TensorFlow op after its ONNX node, and TensorFlow refuses a scope name with any other character:
a node named ``Softmax@0`` (as PaddlePaddle's exporter and graph rewriters name nodes) fails the conversion with
"'Softmax@0' is not a valid scope name". Each other character becomes ``_`` (with a suffix when that name is taken);
tensor names, which the inputs and outputs keep, are left as they are.
"""

from __future__ import annotations

import re

_INVALID = re.compile(r"[^A-Za-z0-9_.\\/>-]")


def scope_safe_node_names(model) -> int:
    """Rename (in place) every node whose name TensorFlow would refuse as a scope; returns how many."""
    taken = {n.name for n in model.graph.node}
    changed = 0
    for node in model.graph.node:
        if not _INVALID.search(node.name):
            continue
        base = _INVALID.sub("_", node.name)
        name, k = base, 1
        while name in taken:
            name, k = f"{base}_{k}", k + 1
        taken.add(name)
        node.name = name
        changed += 1
    return changed
