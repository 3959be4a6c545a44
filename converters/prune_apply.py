"""Rewriting an ONNX graph for structured channel pruning: choose the kept channels, slice the initializers.

Each channel group (see :mod:`edgeopt.converters.prune_graph`) gets one mask: its producer Convs' filters
are scored by L1 norm, each producer's norms divided by their mean (so that a group of Convs that meet at
a residual Add is scored fairly) and summed; the highest-scoring channels are kept, in their original order.
"""

from __future__ import annotations

import numpy as np

from edgeopt.converters.prune_graph import ChannelGroup, GraphIndex


def kept_count(channels: int, ratio: float, min_channels: int, round_to: int) -> int:
    """Channels kept: ``ratio`` of them removed, rounded up to a multiple of ``round_to``, at least ``min_channels``."""
    keep = channels - int(round(ratio * channels))
    keep = -(-keep // round_to) * round_to
    return int(min(channels, max(keep, min_channels, 1)))


def channel_scores(ix: GraphIndex, grp: ChannelGroup) -> np.ndarray:
    """Summed, mean-normalised L1 norms of the group's producer filters (higher = more important)."""
    score = np.zeros(grp.channels, dtype=np.float64)
    for p in grp.producers:
        w = ix.init_array(ix.nodes[p].input[1]).astype(np.float64)
        norms = np.abs(w.reshape(w.shape[0], -1)).sum(axis=1) * _bn_scale(ix, p)
        mean = norms.mean()
        score += norms / mean if mean > 0 else norms
    return score


def _bn_scale(ix: GraphIndex, conv: int) -> np.ndarray | float:
    """|gamma| / sqrt(var + eps) of a BatchNormalization right after ``conv`` (1 if none): the L1 norm is then
    that of the filter with its BN folded in, the same whether or not normalize folded BN already."""
    users = ix.consumers.get(ix.nodes[conv].output[0], [])
    if len(users) != 1 or ix.nodes[users[0][0]].op_type != "BatchNormalization":
        return 1.0
    bn = users[0][0]
    gamma, var = ix.const(ix.nodes[bn].input[1]), ix.const(ix.nodes[bn].input[4])
    if gamma is None or var is None:
        return 1.0
    return np.abs(gamma.astype(np.float64)) / np.sqrt(var.astype(np.float64) + float(ix.attr(bn, "epsilon", 1e-5)))


def keep_indices(scores: np.ndarray, n_keep: int) -> np.ndarray:
    order = np.argsort(-scores, kind="stable")  # ties keep the lower channel index
    return np.sort(order[:n_keep])


def apply(model, ix: GraphIndex, plan: list[tuple[ChannelGroup, np.ndarray]]):
    """A new model with every group's channels cut to its kept indices (value_info cleared, not yet re-inferred)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    nodes = list(graph.node)
    arrays: dict[str, np.ndarray] = {}
    owner: dict[str, tuple[int, int]] = {}  # initializer -> the one (node, input) allowed to change it
    fresh = 0
    copied: set[str] = set()
    for grp, keep in plan:
        for e in grp.edits:
            node = nodes[e.node]
            name = node.input[e.input_index]
            if name in owner and owner[name] != (e.node, e.input_index) or ix.uses.get(name, 0) > 1 and name not in owner:
                # shared initializer: this node gets its own copy
                base = ix.init_array(name)  # always the original values
                fresh += 1
                new = f"{name}__pruned{fresh}"
                arrays[new] = base
                copied.add(name)
                node.input[e.input_index] = new
                name = new
            owner[name] = (e.node, e.input_index)
            arr = arrays[name] if name in arrays else ix.init_array(name)
            idx = keep if e.block == 1 else (keep[:, None] * e.block + np.arange(e.block)).ravel()
            arrays[name] = np.take(arr, idx, axis=e.axis)
        for d in grp.depthwise:
            for a in nodes[d].attribute:
                if a.name == "group":
                    a.i = len(keep)
    replaced = {i.name: n for n, i in enumerate(graph.initializer)}
    for name, arr in arrays.items():
        tensor = numpy_helper.from_array(np.ascontiguousarray(arr), name)
        if name in replaced:
            graph.initializer[replaced[name]].CopyFrom(tensor)
        else:
            graph.initializer.append(tensor)
    used = {i for n in graph.node for i in n.input} | {o.name for o in graph.output} | {i.name for i in graph.input}
    orphans = copied - used  # shared originals whose every user now has a copy
    if orphans:
        kept = [t for t in graph.initializer if t.name not in orphans]
        del graph.initializer[:]
        graph.initializer.extend(kept)
    for vi in graph.input:  # old-IR models list initializers as inputs too
        if vi.name in arrays:
            dims = vi.type.tensor_type.shape.dim
            del dims[:]
            for d in arrays[vi.name].shape:
                dims.add().dim_value = int(d)
    del graph.value_info[:]
    return model


def finish(model, original=None):
    """Shape inference and the ONNX checker on the rewritten model; raises on any inconsistency.

    Inference is strict (a shape mismatch is an error) unless strict inference already fails on the
    ``original`` (custom-domain ops): then the ONNX Runtime run that follows is the check.
    """
    import onnx

    strict = True
    if original is not None:
        try:
            onnx.shape_inference.infer_shapes(original, strict_mode=True)
        except Exception:  # noqa: BLE001 - whatever the original trips on is not ours to report
            strict = False
    model = onnx.shape_inference.infer_shapes(model, strict_mode=strict, data_prop=strict)
    onnx.checker.check_model(model, full_check=False)
    return model


def consumer_input_means(model, ix: GraphIndex, plan, feeds: list[dict]) -> dict[str, np.ndarray]:
    """Mean of every consumer's input tensor over ``feeds``: per channel for a Conv, per column after Flatten."""
    from edgeopt.runtime.reference import session, with_outputs

    wanted = sorted({ix.nodes[c].input[0] for grp, _ in plan for c in grp.consumers})
    sess = session(with_outputs(model, wanted))
    inputs = {i.name for i in sess.get_inputs()}
    sums: dict[str, np.ndarray] = {}
    for feed in feeds:
        outs = sess.run(wanted, {k: np.asarray(v, dtype=np.float32) for k, v in feed.items() if k in inputs})
        for name, arr in zip(wanted, outs, strict=True):
            axes = (0, *range(2, arr.ndim)) if ix.shapes.get(name) and len(ix.shapes[name]) > 2 else (0,)
            m = arr.astype(np.float64).mean(axis=axes)
            sums[name] = sums.get(name, 0) + m
    return {k: v / len(feeds) for k, v in sums.items()}


def bias_compensation(ix: GraphIndex, plan, means: dict[str, np.ndarray]) -> tuple[dict[int, np.ndarray], list[str]]:
    """Per consumer node, what its removed input channels added on average (full-size, before any slicing).

    A removed channel j that carried a mean activation m_j added ``m_j * sum(W[o, j])`` to output o of a
    Conv (exact away from zero-padded borders) or ``W[cols_j] @ m_cols`` to a Gemm: adding that to the
    consumer's bias keeps the outputs' mean where it was. MatMul has no bias and is left uncompensated.
    """
    deltas: dict[int, np.ndarray] = {}
    missed: list[str] = []
    for grp, keep in plan:
        removed = np.setdiff1d(np.arange(grp.channels), keep)
        for e in grp.edits:
            node = ix.nodes[e.node]
            if e.node not in grp.consumers or node.input[0] not in means or e.input_index != 1:
                continue
            if node.op_type == "Conv" and e.axis != 1:  # its producer role (a Conv feeding its own group)
                continue
            w = ix.init_array(node.input[1]).astype(np.float64)
            m = means[node.input[0]]
            if node.op_type == "Conv":
                delta = w[:, removed].reshape(w.shape[0], len(removed), -1).sum(axis=2) @ m[removed]
            elif node.op_type == "Gemm":
                cols = (removed[:, None] * e.block + np.arange(e.block)).ravel()
                wc = w[:, cols] if e.axis == 1 else w[cols].T
                delta = wc @ m[cols] * float(ix.attr(e.node, "alpha", 1.0))
            else:
                missed.append(ix.name(e.node))
                continue
            deltas[e.node] = deltas.get(e.node, 0) + delta
    return deltas, missed


def add_to_bias(model, ix: GraphIndex, plan, deltas: dict[int, np.ndarray]) -> None:
    """Add each consumer's compensation to its (already sliced) bias, creating a bias where it had none."""
    from onnx import numpy_helper

    out_keep = {p: keep for grp, keep in plan for p in grp.producers}
    graph = model.graph
    by_name = {t.name: t for t in graph.initializer}
    for i, delta in deltas.items():
        node = graph.node[i]
        if i in out_keep:
            delta = delta[out_keep[i]]
        slot = 2
        if node.op_type == "Gemm" and float(ix.attr(i, "beta", 1.0)) != 1.0:
            delta = delta / float(ix.attr(i, "beta", 1.0))
        name = f"{node.name or node.op_type + str(i)}__prune_bias"
        if len(node.input) > slot and node.input[slot] in by_name:
            old = numpy_helper.to_array(by_name[node.input[slot]]).astype(np.float64)
            bias = old.reshape(-1) if old.size == delta.size else np.broadcast_to(old.reshape(-1), delta.shape)
            graph.initializer.append(numpy_helper.from_array((bias + delta).astype(np.float32), name))
            node.input[slot] = name  # a new initializer: the old one may be shared (dropped below if unused)
        elif len(node.input) <= slot or not node.input[slot]:
            graph.initializer.append(numpy_helper.from_array(delta.astype(np.float32), name))
            while len(node.input) < slot:
                node.input.append("")
            if len(node.input) > slot:
                node.input[slot] = name
            else:
                node.input.append(name)
    used = {n for node in graph.node for n in node.input}
    kept = [t for t in graph.initializer if t.name in used or t.name not in by_name]
    if len(kept) != len(graph.initializer):
        del graph.initializer[:]
        graph.initializer.extend(kept)


def constants_to_initializers(model):
    """Top-level ``Constant`` nodes (``value`` tensors) become initializers, so their weights can be sliced.

    Exporters such as Paddle's emit every weight as a Constant node; the graph computes the same thing.
    """
    import onnx

    graph = model.graph
    hoist = [n for n in graph.node if n.op_type == "Constant" and len(n.attribute) == 1 and n.attribute[0].name == "value"]
    if not hoist:
        return model
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    kept = []
    for node in graph.node:
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
            tensor = onnx.TensorProto()
            tensor.CopyFrom(node.attribute[0].t)
            tensor.name = node.output[0]
            graph.initializer.append(tensor)
        else:
            kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)
    return model
