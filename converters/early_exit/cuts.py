"""Where a trained model can be cut into stages, and the stage models with their exit heads.

A tensor is a cut point when, in the graph's topological order, it is the only value alive across that point
(everything after it depends on it and on weights alone): the end of a block or stage, never the middle of a
residual branch. Cut points are placed by each prefix's cost in the artifact's backend at the run's precision
(:mod:`.prefix_cost`: timed on this host, one thread, or estimated where it can't be timed), not MACs: early
high-resolution stages cost more per MAC, and more still in some runtimes and precisions.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

MAX_TIMED_CANDIDATES = 12  # prefixes timed to place the cuts
MIN_SPATIAL_RANK = 3  # [N, C, ...]: the head pools every axis after the channel axis
# a tensor that only feeds one of these is inside a block (a conv before its norm or activation, a quantized
# tensor before its dequantization), not at its end
INSIDE_BLOCK = {"BatchNormalization", "Relu", "Clip", "HardSwish", "HardSigmoid", "Sigmoid", "LeakyRelu", "PRelu",
                "Elu", "Selu", "Tanh", "Swish", "Gelu", "QuantizeLinear", "DequantizeLinear", "Cast"}


def value_ranks(proto) -> dict[str, int]:
    """Rank of every value with a known shape (after ONNX shape inference)."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(proto)
    g = inferred.graph
    out = {}
    for v in [*g.input, *g.value_info, *g.output]:
        t = v.type.tensor_type
        if t.HasField("shape"):
            out[v.name] = len(t.shape.dim)
    return out


def cut_candidates(proto) -> list[str]:
    """Tensors (in topological order) that alone carry everything the rest of the graph needs, with rank >= 3."""
    g = proto.graph
    inits = {t.name for t in g.initializer}
    for node in g.node:  # tensors computed from weights alone (a QDQ model's dequantized weights) are weights too
        if all(not i or i in inits for i in node.input):
            inits |= set(node.output)
    last_use: dict[str, int] = {}
    for i, node in enumerate(g.node):
        for name in node.input:
            if name and name not in inits:
                last_use[name] = i
    outputs = {o.name for o in g.output}
    for name in outputs:
        last_use[name] = len(g.node)
    ranks = value_ranks(proto)
    consumers: dict[str, set[str]] = {}
    for node in g.node:
        for name in node.input:
            consumers.setdefault(name, set()).add(node.op_type)
    alive = {i.name for i in g.input if i.name not in inits and i.name in last_use}
    out = []
    for i, node in enumerate(g.node[:-1]):
        if set(node.output) <= inits:
            continue
        alive |= {o for o in node.output if o in last_use}
        alive = {v for v in alive if last_use[v] > i}
        if len(alive) == 1:
            (t,) = alive
            inside = consumers.get(t, set()) <= INSIDE_BLOCK
            if t in node.output and t not in outputs and ranks.get(t, 0) >= MIN_SPATIAL_RANK and not inside:
                out.append(t)
    return out


def extract(src: Path, dst: Path, inputs: list[str], outputs: list[str]) -> Path:
    """The sub-graph of ``src`` from ``inputs`` to ``outputs`` (``onnx.utils.extract_model``)."""
    import onnx.utils

    onnx.utils.extract_model(str(src), str(dst), inputs, outputs, check_model=False)
    return dst


def time_model(path: Path, feed: dict[str, np.ndarray], runs: int, open_run=None) -> float:
    """Milliseconds of one run of ``path`` on ``feed`` (see :func:`time_models`)."""
    return time_models([path], feed, runs, open_run)[0]


def time_models(paths: list[Path], feed: dict[str, np.ndarray], runs: int, open_run=None) -> list[float]:
    """Milliseconds of one run of each of ``paths`` on ``feed``: the 20th percentile of ``runs``, which other
    processes on a busy machine inflate less than the median, the models run in turn in each round so that a load
    changing over the minutes weighs on all alike. ``open_run``: ONNX path -> run function (a backend's
    ``prefix_timer``); None: the reference runtime, one thread, CPU."""
    from edgeopt.runtime.run_fn import run_fn

    fns = [open_run(p) if open_run is not None else run_fn(p, 1) for p in paths]
    for fn in fns:
        for _ in range(max(2, runs // 5)):
            fn(feed)
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for fn, seen in zip(fns, times, strict=True):
            t0 = time.perf_counter()
            fn(feed)
            seen.append(time.perf_counter() - t0)
    return [float(np.percentile(seen, 20) * 1000.0) for seen in times]


def timed_candidates(candidates: list[str], limit: int = MAX_TIMED_CANDIDATES) -> list[str]:
    """At most ``limit`` candidates spread over the graph's order (every step-th), to be costed."""
    step = max(1, len(candidates) // max(1, limit))
    return candidates[step - 1::step][:limit]


def prefix_paths(candidates: list[str], limit: int, work: Path) -> dict[str, Path]:
    """Where :func:`place_cuts` writes each costed candidate's prefix model."""
    return {t: work / f"prefix{k}.onnx" for k, t in enumerate(timed_candidates(candidates, limit))}


def place_cuts(model: Path, candidates: list[str], fractions, work: Path, measure, limit: int = MAX_TIMED_CANDIDATES,
               ) -> tuple[list, dict]:
    """The candidates nearest ``fractions`` of the full model's cost, in order, each once; and the prefix costs
    ({tensor: ms}, plus ``"full"``). ``measure``: ONNX paths -> ms of each (:mod:`.prefix_cost`); ``limit``: the most
    candidates costed."""
    import onnx

    if not candidates:
        return [], {}
    timed = timed_candidates(candidates, limit)
    input_names = [i.name for i in onnx.load(str(model), load_external_data=False).graph.input]
    paths = [extract(model, p, input_names, [t]) for t, p in prefix_paths(candidates, limit, work).items()]
    full, *each = measure([model, *paths])
    times = {"full": full, **dict(zip(timed, each, strict=True))}
    running = 0.0
    for t in timed:  # a prefix never costs less than a shorter one: noise that says so is evened out
        running = times[t] = max(running, min(times[t], times["full"]))
    chosen = nearest(timed, times, fractions)
    chosen.sort(key=candidates.index)
    return chosen, times


def nearest(timed: list[str], times: dict, fractions) -> list[str]:
    """For each fraction, the timed candidate whose share of ``times["full"]`` is nearest it, each once. Of
    candidates that cost the same (a layout change between them, or noise evened out), the latest: as cheap, and
    in the layout the next computing node reads (a Transpose to channels-first before a Conv), which is what a
    head pooling every axis after the channel axis expects."""
    chosen = []
    for f in fractions:
        best = min(reversed(timed), key=lambda t: abs(times[t] / times["full"] - f))
        if best not in chosen:
            chosen.append(best)
    return chosen


def head_nodes(proto_opset: int, feature: str, rank: int, weight: np.ndarray, bias: np.ndarray, prefix: str):
    """Nodes and weights of one exit head: global average pool over the axes after the channel axis, then a
    linear layer to the classes; the output is ``<prefix>_logits`` [N, C]."""
    from onnx import helper, numpy_helper

    axes = list(range(2, rank))
    pooled, logits = f"{prefix}_pooled", f"{prefix}_logits"
    inits = [numpy_helper.from_array(weight.astype(np.float32), f"{prefix}_w"),
             numpy_helper.from_array(bias.astype(np.float32), f"{prefix}_b")]
    if proto_opset >= 18:
        inits.append(numpy_helper.from_array(np.asarray(axes, np.int64), f"{prefix}_axes"))
        pool = helper.make_node("ReduceMean", [feature, f"{prefix}_axes"], [pooled], keepdims=0)
    else:
        pool = helper.make_node("ReduceMean", [feature], [pooled], axes=axes, keepdims=0)
    gemm = helper.make_node("Gemm", [pooled, f"{prefix}_w", f"{prefix}_b"], [logits], transB=1)
    return [pool, gemm], inits, logits


def with_head(stage_path: Path, feature: str, rank: int, weight, bias, prefix: str) -> list[str]:
    """Add an exit head on ``feature`` to the stage model at ``stage_path`` (in place); returns its outputs."""
    import onnx
    from onnx import TensorProto, helper

    proto = onnx.load(str(stage_path))
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 13)
    nodes, inits, logits = head_nodes(opset, feature, rank, weight, bias, prefix)
    proto.graph.node.extend(nodes)
    proto.graph.initializer.extend(inits)
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    batch = dims[0].dim_value if dims and dims[0].dim_value > 0 else None  # static where the model's batch is
    proto.graph.output.append(helper.make_tensor_value_info(logits, TensorProto.FLOAT, [batch, int(weight.shape[0])]))
    onnx.save(proto, str(stage_path))
    return [o.name for o in proto.graph.output]
