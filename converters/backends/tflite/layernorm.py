"""LayerNormalization's scale and bias as onnx2tf takes them: ``[C]``, not ``[1, C]``.

A torch export (or a graph rewritten by an optimiser) can give LayerNormalization a scale/bias of shape ``[1, C]``
(or ``[1, 1, C]``); ONNX broadcasts it, but onnx2tf 1.28.8 fails on it ("Eager execution of tf.constant with
unsupported shape") and the model gets no ``.tflite``. The same values reshaped to ``[C]`` give the same op.
"""

from __future__ import annotations

import numpy as np


def flatten_layernorm_params(model) -> int:
    """Reshape every LayerNormalization scale/bias initializer whose leading dims are all 1 to its last dim
    (in place; a copy when another node shares it). Returns how many were reshaped."""
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    users: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            users[name] = users.get(name, 0) + 1
    changed = 0
    for node in model.graph.node:
        if node.op_type != "LayerNormalization":
            continue
        for k in (1, 2):
            name = node.input[k] if len(node.input) > k else ""
            if name not in inits or len(inits[name].dims) < 2 or any(d != 1 for d in inits[name].dims[:-1]):
                continue
            arr = numpy_helper.to_array(inits[name]).reshape(-1)
            if users.get(name, 0) > 1:
                new = numpy_helper.from_array(np.ascontiguousarray(arr), f"{name}__flat_{node.name or changed}")
                model.graph.initializer.append(new)
                node.input[k] = new.name
            else:
                inits[name].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(arr), name))
            changed += 1
    return changed
