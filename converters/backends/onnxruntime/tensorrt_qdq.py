"""Pre-flight check of a QDQ ONNX model against TensorRT's explicit-quantization rules, by node name.

TensorRT (docs: "Explicit Quantization", ``IQuantizeLayer``/``IDequantizeLayer``) builds an engine from Q/DQ
only with symmetric quantization: the zero point must hold only zeros, INT8 is signed (``[-128, 127]``), scales
are strictly positive; activations are quantized per tensor (a scalar scale) and weights may be per channel (a 1-D
scale as long as the quantization axis). Those are ``violations``: the engine build on the board fails on them.
The linear operators (Conv, Gemm, MatMul) fuse with the Q/DQ around them, and run in INT8, only when their data and
weight inputs both come through a DequantizeLinear; one with only one of them through DQ (a node the INT8 search or
``nodes_to_exclude`` kept in float) is legal and runs in float: ``placement`` names those, it does not refuse them.
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, ConfigDict

from edgeopt.enums import StrEnum

LINEAR_OPS = ("Conv", "Gemm", "MatMul")
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


class TrtRule(StrEnum):
    SIGNED_INT8 = "signed-int8"  # int8, not uint8 (nor an int32 bias: TensorRT's parser rejects its DQ)
    ZERO_POINT_0 = "zero-point-0"  # symmetric
    POSITIVE_SCALE = "positive-scale"
    PER_TENSOR_ACTIVATION = "per-tensor-activation"
    PER_CHANNEL_WEIGHT = "per-channel-weight"  # axis set and a scale vector over the output channels
    INPUTS_THROUGH_DQ = "inputs-through-dq"  # Conv/Gemm/MatMul in INT8 needs data and weight through DQ (placement)


class QdqViolation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    node: str
    rule: TrtRule
    detail: str


class TrtQdqReport(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    qdq_nodes: int
    quantized_linear_ops: int  # Conv/Gemm/MatMul with both inputs through DQ
    float_linear_ops: int  # left in float (TensorRT runs them in float: allowed)
    per_tensor_weights: tuple[str, ...] = ()  # weight DQs with one scale: TensorRT takes them, less accurately
    violations: tuple[QdqViolation, ...] = ()  # what the engine build fails on
    placement: tuple[QdqViolation, ...] = ()  # linear ops with one input through DQ: they run in float on TensorRT

    @property
    def passed(self) -> bool:
        return not self.violations

    def nodes(self) -> dict[str, list[QdqViolation]]:
        """The violations grouped by node, in graph order."""
        out: dict[str, list[QdqViolation]] = {}
        for v in self.violations:
            out.setdefault(v.node, []).append(v)
        return out

    def summary(self, examples: int = 2, placement: bool = False) -> str:
        """One line: each broken rule, how many nodes break it and the first of them, with why (``placement``: of the
        placement notes instead)."""
        by_rule: dict[TrtRule, list[QdqViolation]] = {}
        for v in self.placement if placement else self.violations:
            by_rule.setdefault(v.rule, []).append(v)
        parts = []
        for rule, vs in by_rule.items():
            named = ", ".join(f"{v.node} ({v.detail})" for v in vs[:examples])
            parts.append(f"{rule.value} at {len(vs)} node(s), e.g. {named}")
        return "; ".join(parts)


def has_qdq(model) -> bool:
    return any(n.op_type in QDQ_OPS for n in model.graph.node)


def _name(node, i: int) -> str:
    return node.name or f"{node.op_type}#{i}"


def _weight_axis(op: str, node, weight: np.ndarray) -> int:
    """The output-channel axis of a linear op's weight: Conv 0, MatMul the last, Gemm 0 with transB else 1."""
    if op == "Conv":
        return 0
    if op == "Gemm":
        trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
        return 0 if trans_b else 1
    return weight.ndim - 1


def check_tensorrt_qdq(model) -> TrtQdqReport:
    """Every violation of TensorRT's Q/DQ rules in ``model`` (an ``onnx.ModelProto``), by node name."""
    from onnx import TensorProto, numpy_helper

    g = model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    init_types = {t.name: t.data_type for t in g.initializer}
    producer = {out: (i, n) for i, n in enumerate(g.node) for out in n.output}
    out: list[QdqViolation] = []
    qdq = [(i, n) for i, n in enumerate(g.node) if n.op_type in QDQ_OPS]
    for i, n in qdq:
        name = _name(n, i)
        zp = n.input[2] if len(n.input) > 2 and n.input[2] else None
        if zp is None and n.op_type == "QuantizeLinear":
            out.append(QdqViolation(node=name, rule=TrtRule.SIGNED_INT8, detail="no zero point: ONNX makes it uint8"))
        elif zp is not None and init_types.get(zp) not in (None, TensorProto.INT8):
            kind = TensorProto.DataType.Name(init_types[zp]).lower()
            out.append(QdqViolation(node=name, rule=TrtRule.SIGNED_INT8, detail=f"{kind}, not int8" + (
                " (a quantized bias: keep biases float)" if kind == "int32" else "")))
        if zp is not None and zp in inits and np.any(inits[zp] != 0):
            out.append(QdqViolation(node=name, rule=TrtRule.ZERO_POINT_0,
                                    detail=f"zero point {np.unique(inits[zp])[:4].tolist()}"))
        scale = inits.get(n.input[1])
        if scale is not None and np.any(scale <= 0):
            out.append(QdqViolation(node=name, rule=TrtRule.POSITIVE_SCALE, detail="a scale is <= 0"))
        if n.op_type == "QuantizeLinear" and n.input[0] not in inits and scale is not None and scale.size > 1:
            out.append(QdqViolation(node=name, rule=TrtRule.PER_TENSOR_ACTIVATION,
                                    detail=f"activation scale has {scale.size} values"))
    quantized = floating = 0
    per_tensor: list[str] = []
    placement: list[QdqViolation] = []
    for i, n in enumerate(g.node):
        if n.op_type not in LINEAR_OPS or len(n.input) < 2:
            continue
        dqs = [producer.get(x) for x in n.input[:2]]
        through = [p is not None and p[1].op_type == "DequantizeLinear" for p in dqs]
        if not any(through):
            floating += 1
            continue
        quantized += all(through)
        if not all(through):
            which = "data" if not through[0] else "weight"
            placement.append(QdqViolation(node=_name(n, i), rule=TrtRule.INPUTS_THROUGH_DQ,
                                          detail=f"its {which} input does not come through DequantizeLinear: it "
                                                 "runs in float"))
            continue
        bad = _weight_rule(n, dqs[1][1], inits)
        if bad == PER_TENSOR:
            per_tensor.append(_name(dqs[1][1], dqs[1][0]))
        elif bad:
            out.append(QdqViolation(node=_name(dqs[1][1], dqs[1][0]), rule=TrtRule.PER_CHANNEL_WEIGHT,
                                    detail=f"weight of {_name(n, i)}: {bad}"))
    return TrtQdqReport(qdq_nodes=len(qdq), quantized_linear_ops=quantized, float_linear_ops=floating,
                        per_tensor_weights=tuple(per_tensor), violations=tuple(out), placement=tuple(placement))


PER_TENSOR = "per-tensor"


def _weight_rule(op_node, dq, inits: dict) -> str | None:
    """Why the weight's DequantizeLinear is not per-channel over the output channels (None: it is; ``PER_TENSOR``:
    one scale, which TensorRT accepts, e.g. where a per-channel quantizer crash was retried per tensor)."""
    weight, scale = inits.get(dq.input[0]), inits.get(dq.input[1])
    if weight is None or scale is None:
        return None  # a weight computed at run time: not a constant TensorRT could quantize per channel
    if scale.size == 1 and weight.shape[_weight_axis(op_node.op_type, op_node, weight)] != 1:
        return PER_TENSOR
    axis_attr = next((a.i for a in dq.attribute if a.name == "axis"), None)
    want = _weight_axis(op_node.op_type, op_node, weight)
    if scale.ndim != 1 or scale.size != weight.shape[want]:
        return f"scale of shape {list(scale.shape)}, not a vector of {weight.shape[want]} (one per output channel)"
    if axis_attr is None and want != 1:
        return f"axis not set (ONNX's default 1), the output channels are axis {want}"
    if axis_attr is not None and axis_attr % weight.ndim != want:
        return f"axis {axis_attr}, the output channels are axis {want}"
    return None
