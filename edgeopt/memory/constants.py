"""Which constants of a graph hold the same values: a runtime that stores identical constants once (OpenVINO's
IR serializer writes each distinct blob of the ``.bin`` once) holds one copy of each group.

Two constants are the same when their bytes are (initializers, ``Constant`` nodes), or when the same op with the
same attributes made them from the same constants (a ``ConstantOfShape`` of one shape and value, a ``Cast`` of one
initializer): the key of a folded output is the op, its attributes and its inputs' keys, as common-subexpression
elimination matches nodes.
"""

from __future__ import annotations

import hashlib


def _digest(*parts: bytes) -> str:
    h = hashlib.sha1()
    for p in parts:
        h.update(len(p).to_bytes(8, "little"))
        h.update(p)
    return h.hexdigest()


def _tensor_key(t) -> str:
    from onnx import numpy_helper

    data = t.raw_data or numpy_helper.to_array(t).tobytes()
    return _digest(b"tensor", str(list(t.dims)).encode(), str(t.data_type).encode(), data)


def constant_keys(graph, params: set[str]) -> dict[str, str]:
    """Each constant tensor of ``graph`` named in ``params`` (initializers and outputs folded at load) -> a key
    that is equal for constants holding the same values."""
    keys = {i.name: _tensor_key(i) for i in graph.initializer if i.name in params}
    for node in graph.node:
        outs = [o for o in node.output if o in params]
        if not outs:
            continue
        if node.op_type == "Constant":
            keys[outs[0]] = _digest(b"Constant", *(a.SerializeToString(deterministic=True) for a in node.attribute))
            continue
        ins = [keys.get(n, f"?{n}") for n in node.input if n]
        attrs = sorted(a.SerializeToString(deterministic=True) for a in node.attribute)
        base = _digest(node.op_type.encode(), node.domain.encode(), *attrs, *(k.encode() for k in ins))
        for k, o in enumerate(node.output):
            if o in params:
                keys[o] = _digest(base.encode(), str(k).encode())
    return keys


def distinct(names: set[str], keys: dict[str, str]) -> set[str]:
    """One name per group of identical constants among ``names`` (the first by name); a name without a key is its
    own group."""
    chosen: dict[str, str] = {}
    for n in sorted(names):
        chosen.setdefault(keys.get(n, f"?{n}"), n)
    return set(chosen.values())
