"""OpenVINO INT8 units: an activation quantizer (FakeQuantize) and the ops that read it, which is what NNCF's
``ignored_scope`` of those ops leaves in float (their input quantizer and their INT8 weights); a unit made float in
place in the INT8 model (:class:`FloatUnits`), and the one-compile ranking of units by their own error
(:func:`local_error_ranking`).
"""

from __future__ import annotations

import numpy as np

from .runs import saved_and_read

# ops a quantizer's value passes through unchanged in NNCF's propagation: follow them to the op that
# really consumes the quantized tensor (its name is what ignored_scope needs)
PASS_THROUGH = {"MaxPool", "AvgPool", "Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Split",
                "VariadicSplit", "StridedSlice", "Gather", "Concat", "Pad", "Interpolate", "ReduceMax", "Relu",
                "DepthToSpace", "SpaceToDepth", "ShuffleChannels"}


def activation_quantizers(q) -> list[str]:
    return [op.get_friendly_name() for op in q.get_ordered_ops() if op.get_type_name() == "FakeQuantize"]


def consumers_to_ignore(q, fq_name: str) -> list[str]:
    """The ops that read quantizer ``fq_name``'s value (through pass-through ops): ignored_scope names."""
    ops = {op.get_friendly_name(): op for op in q.get_ordered_ops()}
    out, todo, seen = [], [(ops[fq_name], 0)], set()
    while todo:
        node, depth = todo.pop()
        for o in node.outputs():
            for ti in o.get_target_inputs():
                c = ti.get_node()
                name = c.get_friendly_name()
                if name in seen or c.get_type_name() == "Result":
                    continue
                seen.add(name)
                out.append(name)
                if c.get_type_name() in PASS_THROUGH and depth < 4:
                    todo.append((c, depth + 1))
    return out



WEIGHT_CHAIN = {"Multiply", "Subtract", "Convert", "Reshape", "Transpose", "Unsqueeze", "Squeeze"}


def _int_weight_chain(node, depth: int = 0) -> bool:
    """Whether ``node`` computes a constant from an integer Constant (NNCF's weight decompression:
    Constant(i8) -> Convert -> [Subtract] -> Multiply), with no activation feeding it."""
    kind = node.get_type_name()
    if kind == "Constant":
        return node.get_output_element_type(0).is_integral()
    if kind not in WEIGHT_CHAIN or depth > 5:
        return False
    srcs = [i.get_source_output().get_node() for i in node.inputs()]
    if any(s.get_type_name() not in WEIGHT_CHAIN | {"Constant"} for s in srcs):
        return False
    return any(_int_weight_chain(s, depth + 1) for s in srcs)


def int8_weight_inputs(op) -> list[int]:
    """The input indices of ``op`` fed by an INT8 weight."""
    return [k for k, i in enumerate(op.inputs())
            if i.get_source_output().get_node().get_type_name() != "Constant"
            and _int_weight_chain(i.get_source_output().get_node())]


class FloatUnits:
    """Making units float in place in a copy of an INT8 model: each named quantizer removed and the INT8
    weights of the ops reading it replaced by the FP32 model's own (matched by op name and input index)."""

    def __init__(self, q, fp32_model):
        self.q = q
        self.fp32_ops = {op.get_friendly_name(): op for op in fp32_model.get_ordered_ops()}
        self._readers: dict[str, list[str]] = {}

    def q_ops(self) -> dict:
        if not hasattr(self, "_q_ops"):
            self._q_ops = {op.get_friendly_name(): op for op in self.q.get_ordered_ops()}
        return self._q_ops

    def readers(self, fq_name: str) -> list[str]:
        if fq_name not in self._readers:
            self._readers[fq_name] = consumers_to_ignore(self.q, fq_name)
        return self._readers[fq_name]

    def fp32_weight(self, op_name: str, k: int):
        """The FP32 model's Constant at ``op_name``'s input ``k`` (None where it is not a plain Constant)."""
        op = self.fp32_ops.get(op_name)
        if op is None or k >= op.get_input_size():
            return None
        src = op.input_value(k).get_node()
        return src if src.get_type_name() == "Constant" else None

    @staticmethod
    def smooth_quant_of(fq):
        """The SmoothQuant Multiply feeding quantizer ``fq`` (None without one): its readers' weights were
        scaled by its inverse, so their FP32 weights go back only with that Multiply bypassed too."""
        src = fq.input_value(0).get_node()
        if src.get_type_name() == "Multiply" and "smooth_quant" in src.get_friendly_name():
            return src
        return None

    def weights_of(self, model, fq_names, *, smooth_quant_ok: bool = False) -> list[tuple[object, int, object]]:
        """(op in ``model``, input index, FP32 Constant) for every INT8 weight the units' readers have. Units
        behind a SmoothQuant Multiply are left out (their INT8 weights are the FP32 ones rescaled) unless
        ``smooth_quant_ok`` (:meth:`apply` bypasses that Multiply)."""
        ops = {op.get_friendly_name(): op for op in model.get_ordered_ops()}
        if not smooth_quant_ok:
            own = self.q_ops()
            fq_names = [fq for fq in fq_names if fq in own and self.smooth_quant_of(own[fq]) is None]
        out = []
        for name in dict.fromkeys(r for fq in fq_names for r in self.readers(fq)):
            op = ops.get(name)
            if op is None:
                continue
            for k in int8_weight_inputs(op):
                c = self.fp32_weight(name, k)
                if c is not None:
                    out.append((op, k, c))
            out += self._biases_after(op)
        return out

    def _biases_after(self, op) -> list[tuple[object, int, object]]:
        """The bias Add after a reader (its Constant input), where NNCF's bias correction changed it to make up
        for the reader's INT8 error: in float the FP32 model's bias goes back too."""
        out = []
        for o in op.outputs():
            for ti in o.get_target_inputs():
                add = ti.get_node()
                if add.get_type_name() != "Add":
                    continue
                for k in range(add.get_input_size()):
                    cur = add.input_value(k).get_node()
                    orig = self.fp32_weight(add.get_friendly_name(), k)
                    if cur.get_type_name() == "Constant" and orig is not None and \
                            tuple(cur.get_output_shape(0)) == tuple(orig.get_output_shape(0)) and \
                            not np.array_equal(cur.get_data(), orig.get_data()):
                        out.append((add, k, orig))
        return out

    def apply(self, fq_names) -> tuple[object, int]:
        """A copy of the INT8 model with those units float; returns (model, float weights put back)."""
        from openvino import opset13

        qc = self.q.clone()
        names = set(fq_names)
        ops = {op.get_friendly_name(): op for op in qc.get_ordered_ops()}
        # a quantizer behind SmoothQuant (x * 1/s -> FQ -> W * s): its readers get their FP32 weights back only
        # when the Multiply can go too (nothing else reads it), else they keep the rescaled INT8 weights
        with_weights, bypass = [], []
        for name in fq_names:
            fq = ops.get(name)
            if fq is None or fq.get_type_name() != "FakeQuantize":
                continue
            sq = self.smooth_quant_of(fq)
            readers = set() if sq is None else {ti.get_node().get_friendly_name() for o in sq.outputs()
                                                for ti in o.get_target_inputs()}
            if sq is None or readers <= names:
                with_weights.append(name)
                if sq is not None:
                    bypass.append(sq)
        for op in ops.values():
            if op.get_friendly_name() in names and op.get_type_name() == "FakeQuantize":
                op.output(0).replace(op.input_value(0))
        for sq in bypass:
            sq.output(0).replace(sq.input_value(0))
        restored = 0
        for op, k, const in self.weights_of(qc, with_weights, smooth_quant_ok=True):
            op.input(k).replace_source_output(opset13.constant(const.get_data()).output(0))
            restored += 1
        return saved_and_read(qc), restored


LOCAL_METHOD = ("each unit's own error: its activation quantizer's on its input, per channel (mean over channels of "
                "|fq(x) - x|^2 / |x|^2, the worse of the channel-first and channel-last readings), plus the same "
                "reading of its readers' INT8 weights against their FP32 weights, read in one run of the INT8 model "
                "with every quantizer's input and output as extra outputs; ranked once")


def local_error_ranking(units: FloatUnits, feeds: list[dict], in_names: list[str], core,
                        threads) -> list[tuple[str, float]]:
    """One compile: every FakeQuantize's input and output (and its readers' dequantized INT8 weights) become
    model outputs; a quantizer that wipes out small channels (outlier activations) scores high even when the
    big channels dominate the norm, and so does a reader whose INT8 weights lose a channel."""
    qc = units.q.clone()
    fqs = [op for op in qc.get_ordered_ops() if op.get_type_name() == "FakeQuantize"]
    for fq in fqs:
        qc.add_outputs([fq.input_value(0), fq.output(0)])
    weights = {fq.get_friendly_name(): units.weights_of(qc, [fq.get_friendly_name()]) for fq in fqs}
    w_slot: dict[tuple[str, int], int] = {}
    for entries in weights.values():
        for op, k, _ in entries:
            key = (op.get_friendly_name(), k)
            if key not in w_slot:
                qc.add_outputs([op.input_value(k)])
                w_slot[key] = _port(op.input_value(k))
    slot = result_slots(qc)
    config = {"INFERENCE_PRECISION_HINT": "f32"}
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    compiled = core.compile_model(qc, "CPU", config)
    errs = np.zeros(len(fqs))
    w_err: dict[tuple[str, int], float] = {}
    for f in feeds:
        res = compiled({k: v for k, v in f.items() if k in in_names})
        for j in range(len(fqs)):
            x = np.asarray(res[slot[_port(fqs[j].input_value(0))]], np.float64)
            y = np.asarray(res[slot[_port(fqs[j].output(0))]], np.float64)
            errs[j] += _channel_error(x, y) / len(feeds)
        if not w_err:
            for entries in weights.values():
                for op, k, const in entries:
                    key = (op.get_friendly_name(), k)
                    if key not in w_err:
                        w_err[key] = _channel_error(np.asarray(const.get_data(), np.float64),
                                                    np.asarray(res[slot[w_slot[key]]], np.float64), axes=(0,))
    scores = [(fq.get_friendly_name(), float(e + sum(w_err.get((op.get_friendly_name(), k), 0.0)
                                                     for op, k, _ in weights[fq.get_friendly_name()])))
              for fq, e in zip(fqs, errs, strict=True)]
    scores.sort(key=lambda t: -t[1])
    return scores


def _port(out) -> tuple[str, int]:
    return out.get_node().get_friendly_name(), out.get_index()


def result_slots(model) -> dict[tuple[str, int], int]:
    """Each tensor the model returns (its producer's name and port) -> its position among the results. A tensor
    that already is a result (a model output, or one FakeQuantize's input that is another's output too) is not
    added twice by ``add_outputs``, so positions can't be counted from the calls."""
    slots: dict[tuple[str, int], int] = {}
    for i, r in enumerate(model.get_results()):
        slots.setdefault(_port(r.input_value(0)), i)
    return slots


def _channel_error(x: np.ndarray, y: np.ndarray, axes: tuple[int, ...] = (1,)) -> float:
    if x.ndim < 2:
        return float(np.sum((y - x) ** 2) / (np.sum(x**2) + 1e-12))
    worst = 0.0
    for axis in {*axes, x.ndim - 1}:
        other = tuple(a for a in range(x.ndim) if a != axis)
        num = np.sum((y - x) ** 2, axis=other)
        den = np.sum(x**2, axis=other)
        live = den > 1e-12 * max(float(den.max()), 1e-30)
        if np.any(live):
            worst = max(worst, float(np.mean(np.minimum(num[live] / den[live], 1.0))))
    return worst
