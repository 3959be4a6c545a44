"""Per-node INT8 sensitivity on a QDQ model, and keeping chosen nodes in float.

Method (the cheap sound one): calibrate once, then for each quantized node build the FP32 model
with *only that node's* Q/DQ pairs (same scales as in the full INT8 model) and measure its output
error against FP32 on the search samples. One calibration, one small session per node, and each
score is the error that node alone brings in (no interaction with the other nodes' error).
Keeping the chosen nodes in float is then the quantizer's own ``nodes_to_exclude`` (a new
calibration per step of the search), so the quantizer's fusions (Relu folded into Q ranges) stay right.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def quantized_nodes(qdq) -> list[str]:
    """Names of the compute nodes that read at least one DequantizeLinear output (graph order)."""
    dq_out = {o for n in qdq.graph.node if n.op_type == "DequantizeLinear" for o in n.output}
    return [n.name for n in qdq.graph.node if n.op_type not in QDQ_OPS and any(i in dq_out for i in n.input)]


def isolate(qdq, fp32, node: str):
    """The FP32 model with only ``node``'s inputs and outputs fake-quantized exactly as in ``qdq``.

    Built by inserting copies of the node's Q/DQ pairs (same scales, same INT8 weights) into the
    FP32 graph rather than by stripping the others from the QDQ graph: the quantizer folds Relu/Clip
    into the Q ranges, so a stripped graph would lose those activations.
    """
    import onnx

    model = onnx.ModelProto()
    model.CopyFrom(fp32)
    g = model.graph
    q_producer = {o: n for n in qdq.graph.node for o in n.output}
    q_inits = {i.name: i for i in qdq.graph.initializer}
    q_node = next(n for n in qdq.graph.node if n.name == node)
    have = {i.name for i in g.initializer}
    for pos, target in enumerate(g.node):  # noqa: B007 - pos is used after the loop
        if target.name == node:
            break
    else:
        return model  # the node is not in the FP32 graph (renamed by pre-processing): nothing to isolate
    inserted = []
    for k, inp in enumerate(q_node.input):
        dq = q_producer.get(inp)
        if dq is None or dq.op_type != "DequantizeLinear" or k >= len(target.input):
            continue
        q = q_producer.get(dq.input[0])
        new_dq = onnx.NodeProto()
        new_dq.CopyFrom(dq)
        new_dq.name = f"iso_{dq.name}_{k}"  # _k: a node reading one tensor twice (x*x) gets two pairs
        new_dq.output[0] = f"iso_{node}_{k}"
        if q is not None and q.op_type == "QuantizeLinear":
            new_q = onnx.NodeProto()
            new_q.CopyFrom(q)
            new_q.name = f"iso_{q.name}_{k}"
            new_q.input[0] = target.input[k]
            new_q.output[0] = f"iso_{node}_{k}_q"
            new_dq.input[0] = new_q.output[0]
            inserted.append(new_q)
            needed = list(q.input[1:]) + list(dq.input[1:])
        else:
            needed = list(dq.input)
        for name in needed:
            if name and name not in have and name in q_inits:
                g.initializer.append(q_inits[name])
                have.add(name)
        inserted.append(new_dq)
        target.input[k] = new_dq.output[0]
    after = []
    q_consumers = {}
    for n in qdq.graph.node:
        if n.op_type == "QuantizeLinear":
            q_consumers.setdefault(n.input[0], n)
    for k, out in enumerate(q_node.output):
        q = q_consumers.get(out)
        dq = next((n for n in qdq.graph.node if n.op_type == "DequantizeLinear" and q is not None
                   and n.input[0] == q.output[0]), None)
        if q is None or dq is None or k >= len(target.output):
            continue
        # the node's output as the quantizer quantizes it (for Relu folded into it: same range, zp clamps)
        t = target.output[k]
        new_q, new_dq = onnx.NodeProto(), onnx.NodeProto()
        new_q.CopyFrom(q)
        new_dq.CopyFrom(dq)
        new_q.name, new_dq.name = f"iso_out_{q.name}", f"iso_out_{dq.name}"
        target.output[k] = f"{t}_iso_pre"
        new_q.input[0], new_q.output[0] = target.output[k], f"{t}_iso_q"
        new_dq.input[0], new_dq.output[0] = new_q.output[0], t
        for name in list(q.input[1:]) + list(dq.input[1:]):
            if name and name not in have and name in q_inits:
                g.initializer.append(q_inits[name])
                have.add(name)
        after += [new_q, new_dq]
    for offset, n in enumerate(inserted):
        g.node.insert(pos + offset, n)
    for offset, n in enumerate(after):
        g.node.insert(pos + len(inserted) + 1 + offset, n)
    return model


def output_error(reference: list[dict], got: list[dict]) -> float:
    """Mean (1 - cosine) over samples and outputs (``edgeopt.metrics.kinds.cosine``, the one definition); an output
    with a non-finite value counts as 1."""
    from edgeopt.metrics.kinds import cosine

    errs = [1.0 - cosine(a, g[name]) if np.all(np.isfinite(g[name])) else 1.0
            for r, g in zip(reference, got, strict=True) for name, a in r.items()]
    return float(np.mean(errs)) if errs else 0.0


UNRANKED = -1.0  # the score of a node the ranking had no time for (kept after every ranked node)


def rank_nodes(qdq, fp32, feeds: list[dict], session_fn: Callable, progress=None,
               deadline: float | None = None) -> list[tuple[str, float]]:
    """(node, error when only it is quantized), most sensitive first. Past ``deadline``
    (``time.perf_counter()``) the remaining nodes get :data:`UNRANKED`, in graph order."""
    import time

    ref_run = session_fn(fp32)
    reference = [ref_run(f) for f in feeds]
    scores = []
    for name in quantized_nodes(qdq):
        if deadline is not None and time.perf_counter() > deadline:
            scores.append((name, UNRANKED))
            continue
        run = session_fn(isolate(qdq, fp32, name))
        scores.append((name, output_error(reference, [run(f) for f in feeds])))
        if progress is not None:
            progress()
    scores.sort(key=lambda t: -t[1])
    return scores


LOCAL_LIMIT = 24  # more quantized nodes than this: each node's own error in one run (one session each is too slow)
LOCAL_METHOD = ("each node's own quantization noise in one run (ONNX Runtime's qdq_loss_debug): the sum over its "
                "quantized inputs and outputs of 10^(-SQNR/10), activations pre vs post QDQ on the search part, "
                "weights FP32 vs dequantized; ranked once")
ISOLATED_METHOD = "output error (1 - cosine) with only that node quantized, on the search part; ranked once"


def rank_nodes_local(qdq_path, fp32_path, data, samples: int, work) -> list[tuple[str, float]]:
    """(node, its own quantization noise), most sensitive first, from one run of the QDQ model with every
    intermediate tensor saved (ONNX Runtime's ``qdq_loss_debug``): for each quantized node the noise that the Q/DQ
    pairs of its inputs and outputs add, as a ratio (``10^(-SQNR/10)``: activations before vs after their QDQ, weights FP32 vs
    dequantized), summed. It ignores how later layers amplify the noise (the isolated ranking measures that, one
    session per node: 358 sessions on PP-OCRv4's recogniser, most of a 120 s budget). ``data``: the first
    ``samples`` of this Dataset are run."""
    from pathlib import Path

    import onnx
    from onnxruntime.quantization import qdq_loss_debug as dbg
    from onnxruntime.quantization.quant_utils import TENSOR_NAME_QUANT_SUFFIX

    from .qdq_static import calibration_reader

    qdq = onnx.load(str(qdq_path))
    augmented = Path(work) / f"{Path(qdq_path).stem}.debug.onnx"
    dbg.modify_model_output_intermediate_tensors(str(qdq_path), str(augmented))
    acts = dbg.collect_activations(str(augmented), calibration_reader(data, [i.name for i in qdq.graph.input], samples))
    augmented.unlink(missing_ok=True)
    weight_sqnr = dbg.compute_weight_error(  # 0-d weights (a scalar Mul) as 1-element arrays: ORT's own takes len()
        dbg.create_weight_matching(str(fp32_path), str(qdq_path)),
        lambda a, b: dbg.compute_signal_to_quantization_noice_ratio([np.atleast_1d(a)], [np.atleast_1d(b)]))
    producer = {o: n for n in qdq.graph.node for o in n.output}

    def sqnr(dq) -> float | None:
        src = dq.input[0]
        if src.endswith(TENSOR_NAME_QUANT_SUFFIX):
            return weight_sqnr.get(src[: -len(TENSOR_NAME_QUANT_SUFFIX)])
        q = producer.get(src)
        if q is None or q.op_type != "QuantizeLinear" or q.input[0] not in acts or dq.output[0] not in acts:
            return None
        return dbg.compute_signal_to_quantization_noice_ratio(acts[q.input[0]], acts[dq.output[0]])

    q_of = {n.input[0]: n for n in qdq.graph.node if n.op_type == "QuantizeLinear"}
    dq_of = {n.input[0]: n for n in qdq.graph.node if n.op_type == "DequantizeLinear"}

    def output_dqs(node) -> list:
        """The DQs of the node's own outputs: keeping it float drops those pairs too (a model's last op, e.g.
        the Sigmoid of a probability map, has no quantized reader to carry that noise)."""
        return [dq_of[q_of[o].output[0]] for o in node.output if o in q_of and q_of[o].output[0] in dq_of]

    by_name = {n.name: n for n in qdq.graph.node}
    scores = []
    for name in quantized_nodes(qdq):
        node = by_name[name]
        dqs = [producer[i] for i in node.input if i in producer and producer[i].op_type == "DequantizeLinear"]
        noise = sum(10.0 ** (-db / 10.0) for db in map(sqnr, dqs + output_dqs(node)) if db is not None)
        scores.append((name, noise))
    scores.sort(key=lambda t: -t[1])
    return scores
