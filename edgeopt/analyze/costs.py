"""Per-node costs of an ONNX graph: FLOPs, parameter bytes, activation bytes, intensity.

Conventions (documented here, shown in ``AnalysisResult.notes``):

* FLOPs = 2 x MACs for Conv / ConvTranspose / Gemm / MatMul / RNNs; bias additions are not counted.
* Elementwise ops count 1 op an output element (x inputs-1 for variadic Sum/Max/Min/Mean);
  transcendental activations a documented weight (``_TRANSCENDENTAL``), labelled ``approx``.
* Pure data movement (Transpose, Concat, Gather, ...) has 0 FLOPs but reads and writes its tensors;
  views (Reshape, Squeeze, Flatten, Shape, Constant, ...) cost nothing: runtimes do not copy them.
* Ops whose inputs are all constants are "folded": runtimes compute them once at load time, so they
  cost nothing and their outputs count as parameters of the ops that read them.
* Bytes = initializer/Constant bytes read + activations read + activations written, each once;
  no cache reuse between ops is assumed (the roofline's usual pessimism for memory traffic).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from edgeopt.analyze.result import CostModel, OpCost

_FLOAT_TYPES = {1, 10, 11, 16}  # FLOAT, FLOAT16, DOUBLE, BFLOAT16

VIEW_OPS = {
    "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Size", "Constant", "Dropout",
}
DATA_MOVEMENT_OPS = {
    "Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND", "ScatterND",
    "ScatterElements", "Pad", "Tile", "Expand", "DepthToSpace", "SpaceToDepth", "Cast", "CastLike",
    "NonZero", "OneHot", "Range", "ConstantOfShape", "Trilu", "Compress", "ReverseSequence",
}
ELEMENTWISE_1 = {
    "Add", "Sub", "Mul", "Div", "Relu", "LeakyRelu", "PRelu", "Abs", "Neg", "Clip", "Floor", "Ceil",
    "Round", "Sign", "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Not",
    "Xor", "Where", "Mod", "BitShift", "Reciprocal", "ThresholdedRelu", "IsNaN", "IsInf", "Shrink",
}
VARIADIC = {"Sum", "Max", "Min", "Mean"}
# ops per element for activations that need a transcendental function (estimates; label "approx")
_TRANSCENDENTAL = {
    "Sigmoid": 4, "Tanh": 4, "Exp": 4, "Log": 4, "Erf": 4, "Pow": 4, "Sqrt": 2, "Softplus": 5,
    "Softsign": 3, "Elu": 5, "Selu": 5, "Celu": 5, "Gelu": 8, "HardSigmoid": 3, "HardSwish": 4,
    "Mish": 10, "Sin": 4, "Cos": 4, "QuantizeLinear": 3, "DequantizeLinear": 2,
}
_NORM = {"InstanceNormalization": 5, "LayerNormalization": 5, "GroupNormalization": 5, "LpNormalization": 3,
         "MeanVarianceNormalization": 5, "LRN": 6}
_POOL = {"MaxPool", "AveragePool", "LpPool"}
_GLOBAL_POOL = {"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool"}
_REDUCE_PREFIX = ("Reduce", "ArgMax", "ArgMin")
_RESIZE_FLOPS = {"nearest": 0, "linear": 8, "bilinear": 8, "cubic": 32}


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...] | None
    elem_type: int
    is_param: bool = False

    @property
    def numel(self) -> int:
        return math.prod(self.shape) if self.shape is not None else 0

    @property
    def itemsize(self) -> int:
        return _itemsize(self.elem_type)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize

    def nbytes_at(self, float_bytes: int | None) -> int:
        """Bytes with float tensors stored at ``float_bytes`` an element (None: as they are)."""
        if float_bytes is None or self.elem_type not in _FLOAT_TYPES:
            return self.nbytes
        return self.numel * min(float_bytes, self.itemsize)


@functools.lru_cache(maxsize=64)
def _itemsize(elem_type: int) -> int:
    from onnx import helper

    try:
        return int(helper.tensor_dtype_to_np_dtype(elem_type).itemsize)
    except Exception:  # noqa: BLE001 - strings, unknown types
        return 4


def _attrs(node) -> dict:
    from onnx import helper

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _dim(t: TensorMeta | None, i: int, default: int = 1) -> int:
    if t is None or t.shape is None or len(t.shape) <= abs(i) - (1 if i < 0 else 0):
        return default
    return int(t.shape[i])


def _conv(node, ins, outs, a, *, w_idx: int = 1, x_idx: int = 0) -> tuple[int, bool]:
    x, w, y = _get(ins, x_idx), _get(ins, w_idx), _get(outs, 0)
    group = int(a.get("group", 1))
    kernel = math.prod(w.shape[2:]) if w is not None and w.shape else 1
    cin_per_group = _dim(w, 1)
    macs = (y.numel if y else 0) * cin_per_group * kernel
    cin = _dim(x, 1, 0)
    depthwise = group > 1 and group == cin and cin_per_group == 1
    return macs, depthwise


def _conv_transpose(ins, outs, a) -> int:
    x, w = _get(ins, 0), _get(ins, 1)
    kernel = math.prod(w.shape[2:]) if w is not None and w.shape else 1
    return (x.numel if x else 0) * _dim(w, 1) * kernel


def _matmul(ins, outs, a_idx: int = 0) -> int:
    a, y = _get(ins, a_idx), _get(outs, 0)
    k = _dim(a, -1) if a is not None and a.shape else 1
    return (y.numel if y else 0) * k


def _gemm(ins, outs, a) -> int:
    x, y = _get(ins, 0), _get(outs, 0)
    k = _dim(x, 0) if a.get("transA", 0) else _dim(x, 1)
    return (y.numel if y else 0) * k


def _rnn(op: str, ins, a) -> tuple[int, int]:
    """(MACs, extra elementwise ops) of an LSTM/GRU/RNN over the whole sequence."""
    x, w = _get(ins, 0), _get(ins, 1)
    gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    dirs = _dim(w, 0)
    hidden = int(a.get("hidden_size") or (_dim(w, 1) // gates))
    layout = int(a.get("layout", 0))
    seq, batch = (_dim(x, 0), _dim(x, 1)) if layout == 0 else (_dim(x, 1), _dim(x, 0))
    inp = _dim(x, 2)
    macs = dirs * seq * batch * gates * hidden * (inp + hidden)
    per_step_elementwise = {"LSTM": 17, "GRU": 14, "RNN": 5}[op]  # gate activations + cell update (approx)
    return macs, dirs * seq * batch * hidden * per_step_elementwise


def _get(seq, i):
    return seq[i] if i < len(seq) else None


def flops_of(node, ins: list[TensorMeta | None], outs: list[TensorMeta | None]) -> tuple[int, int, CostModel, bool]:
    """(FLOPs, MACs, cost model, depthwise) of one node."""
    op, a = node.op_type, _attrs(node)
    y = _get(outs, 0)
    out_n = y.numel if y is not None else 0
    if op in VIEW_OPS:
        return 0, 0, CostModel.VIEW, False
    if op in DATA_MOVEMENT_OPS:
        return 0, 0, CostModel.DATA_MOVEMENT, False
    if op in ("Conv", "ConvInteger", "QLinearConv"):
        macs, dw = _conv(node, ins, outs, a, w_idx=3 if op == "QLinearConv" else 1)
        return 2 * macs, macs, CostModel.EXACT, dw
    if op == "ConvTranspose":
        macs = _conv_transpose(ins, outs, a)
        return 2 * macs, macs, CostModel.EXACT, False
    if op in ("MatMul", "MatMulInteger", "QLinearMatMul"):
        macs = _matmul(ins, outs)
        return 2 * macs, macs, CostModel.EXACT, False
    if op == "Gemm":
        macs = _gemm(ins, outs, a)
        return 2 * macs, macs, CostModel.EXACT, False
    if op in ("LSTM", "GRU", "RNN"):
        macs, extra = _rnn(op, ins, a)
        return 2 * macs + extra, macs, CostModel.APPROX, False
    if op in ELEMENTWISE_1:
        return out_n, 0, CostModel.EXACT, False
    if op in VARIADIC:
        n = max(1, len([i for i in node.input if i]) - 1)
        return n * out_n, 0, CostModel.EXACT, False
    if op in _TRANSCENDENTAL:
        return _TRANSCENDENTAL[op] * out_n, 0, CostModel.APPROX, False
    if op == "BatchNormalization":
        return 2 * out_n, 0, CostModel.EXACT, False
    if op in _NORM:
        return _NORM[op] * out_n, 0, CostModel.APPROX, False
    if op in ("Softmax", "LogSoftmax", "Hardmax"):
        return 5 * out_n, 0, CostModel.APPROX, False
    if op in _POOL:
        k = math.prod(a.get("kernel_shape", [1]))
        return out_n * k, 0, CostModel.EXACT, False
    if op in _GLOBAL_POOL:
        x = _get(ins, 0)
        return (x.numel if x else 0), 0, CostModel.EXACT, False
    if op.startswith(_REDUCE_PREFIX) or op in ("CumSum", "TopK"):
        x = _get(ins, 0)
        return (x.numel if x else 0), 0, CostModel.APPROX, False
    if op in ("Resize", "Upsample"):
        mode = a.get("mode", b"nearest")
        mode = mode.decode() if isinstance(mode, bytes) else str(mode)
        per = _RESIZE_FLOPS.get(mode, 8)
        return per * out_n, 0, (CostModel.DATA_MOVEMENT if per == 0 else CostModel.APPROX), False
    if op in ("If", "Loop", "Scan"):
        return 0, 0, CostModel.VIEW, False  # their subgraphs are costed node by node
    return out_n, 0, CostModel.UNKNOWN, False


def node_cost(node, ins: list[TensorMeta | None], outs: list[TensorMeta | None], *, folded: bool = False) -> OpCost:
    flops, macs, model, depthwise = flops_of(node, ins, outs)
    if folded:
        flops, macs, model = 0, 0, CostModel.FOLDED
    free = model in (CostModel.VIEW, CostModel.FOLDED)
    present = [t for t in ins if t is not None] if not free else []
    written = [t for t in outs if t is not None] if not free else []

    def traffic(float_bytes: int | None) -> tuple[int, int, int]:
        return (
            sum(t.nbytes_at(float_bytes) for t in present if t.is_param),
            sum(t.nbytes_at(float_bytes) for t in present if not t.is_param),
            sum(t.nbytes_at(float_bytes) for t in written),
        )

    params, reads, writes = traffic(None)
    total = params + reads + writes
    return OpCost(
        name=node.name or f"{node.op_type}:{node.output[0] if node.output else '?'}",
        op_type=node.op_type,
        flops=int(flops),
        macs=int(macs),
        param_bytes=int(params),
        act_read_bytes=int(reads),
        act_write_bytes=int(writes),
        bytes_fp32=int(total),
        bytes_fp16=int(sum(traffic(2))),
        bytes_int8=int(sum(traffic(1))),
        intensity=round(flops / total, 4) if total else 0.0,
        output_shapes=[list(t.shape) for t in outs if t is not None and t.shape is not None],
        cost_model=model,
        depthwise=depthwise,
    )


def _branch_costs(graph, metas, prefix: str) -> list[OpCost]:
    ops = graph_costs_of(graph, metas)
    return [o.model_copy(update={"name": f"{prefix}/{o.name}"}) for o in ops]


def graph_costs_of(graph, metas: dict[str, TensorMeta]) -> list[OpCost]:
    """One :class:`OpCost` per node; an If counts its heavier branch, a Loop/Scan its body once."""
    out = []
    for node in graph.node:
        ins = [metas.get(n) if n else None for n in node.input]
        outs = [metas.get(n) if n else None for n in node.output]
        given = [t for n, t in zip(node.input, ins, strict=True) if n]
        folded = (node.op_type not in ("Constant", "If", "Loop", "Scan") and bool(given)
                  and all(t is not None and t.is_param for t in given))
        out.append(node_cost(node, ins, outs, folded=folded))
        if folded:  # its outputs are constants too, read as parameters by their consumers
            for n, t in zip(node.output, outs, strict=True):
                if n and t is not None:
                    metas[n] = TensorMeta(t.shape, t.elem_type, is_param=True)
        if node.op_type == "If":
            branches = [_branch_costs(a.g, metas, f"{out[-1].name}/{a.name}") for a in node.attribute if a.HasField("g")]
            if branches:
                out.extend(max(branches, key=lambda ops: (sum(o.flops for o in ops), sum(o.bytes_fp32 for o in ops))))
        elif node.op_type in ("Loop", "Scan"):
            for a in node.attribute:
                if a.HasField("g"):
                    out.extend(_branch_costs(a.g, metas, f"{out[-1].name}/{a.name}"))
    return out


def graph_costs(model, metas: dict[str, TensorMeta]) -> list[OpCost]:
    """Costs of every node of ``model`` (see :func:`graph_costs_of`); ``metas`` is not changed."""
    return graph_costs_of(model.graph, dict(metas))
