"""Predicted peak memory of a model on a backend: weights in the artifact's precision + the activation arena
(:mod:`.plan`) + the runtime's base cost (:mod:`.facts`).

Every figure is an estimate and says so (``estimate: True``). On a microcontroller (TFLite Micro) the
weights stay in flash: RAM is the arena and TFLM's own allocations, flash the model file.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict

from edgeopt.enums import Precision

NOTES = (
    "estimate: weights at the artifact's precision (INT8: float weights of 2+ dimensions at 1 byte, biases and "
    "vectors at 4); arena: activations laid out greedy by size over their lifetimes in ONNX node order (TFLite "
    "Micro's planner), INT8 activations at 1 byte where only ops the runtime runs in INT8 touch them; constants "
    "folded at load counted as weights (OpenVINO: identical constants once); runtime: the base cost measured once "
    "per runtime (its source and date in runtime_source), with, where measured, a cost per op and what an INT8 "
    "artifact adds, plus the copies of the weights (and, ONNX Runtime, of the arena; LiteRT INT8, of the arena) "
    "it holds at its peak (runtime_copies_bytes)."
)


class MemoryPrediction(BaseModel):
    """Predicted peak memory (bytes). ``total_bytes`` is RAM: weights + arena + runtime, or, when
    ``weights_in_flash`` (a microcontroller), arena + runtime with the weights counted in ``flash_bytes``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str
    precision: str
    weights_bytes: int
    arena_bytes: int
    runtime_bytes: int  # the base cost plus runtime_copies_bytes
    total_bytes: int
    runtime_copies_bytes: int = 0  # copies of the weights and arena the runtime holds at its peak (memory.facts)
    weights_in_flash: bool = False
    flash_bytes: int | None = None
    runtime_source: str = ""
    estimate: bool = True
    live_bytes: list[int] = []
    node_names: list[str] = []
    notes: list[str] = []

    def figures(self) -> str:
        """``612 MB (weights 410, arena 180, runtime 22)``, in the unit that suits the size."""
        parts = [f"arena {size_text(self.arena_bytes)}", f"runtime {size_text(self.runtime_bytes)}"]
        if not self.weights_in_flash:
            parts.insert(0, f"weights {size_text(self.weights_bytes)}")
        return f"{size_text(self.total_bytes)} ({', '.join(parts)})"


def human_unit(n: int | float) -> tuple[str, float]:
    """(unit, divisor) that shows ``n`` bytes readably: KB below 1 MB, MB below 1 GB, else GB (powers of 1000)."""
    if n < 1e6:
        return "KB", 1e3
    if n < 1e9:
        return "MB", 1e6
    return "GB", 1e9


def size_text(n: int | float) -> str:
    """``45.4 MB``, ``24.6 KB``: 4 significant digits in the unit that suits (powers of 1000)."""
    unit, div = human_unit(n)
    return f"{n / div:.4g} {unit}"


def float_bytes(precision: Precision) -> int:
    return {Precision.INT8: 1, Precision.FP16: 2, Precision.BF16: 2}.get(precision, 4)


def fold_constants(graph, metas) -> set[str]:
    """Marks as parameters the outputs of nodes whose inputs are all constants (ONNX Runtime and OpenVINO fold them
    at load and keep the result as a weight: a ``ConstantOfShape`` or ``Constant`` made weight is a weight, not an
    activation); returns the names of the constants the remaining nodes read (what the runtime keeps)."""
    from edgeopt.analyze.costs import TensorMeta

    kept: set[str] = set()
    for node in graph.node:
        given = [n for n in node.input if n]
        ins = [metas.get(n) for n in given]
        if node.op_type == "Constant" or (given and node.op_type not in ("If", "Loop", "Scan")
                                          and all(t is not None and t.is_param for t in ins)):
            for n in node.output:
                if n and metas.get(n) is not None:
                    metas[n] = TensorMeta(metas[n].shape, metas[n].elem_type, is_param=True)
            continue
        kept.update(n for n, t in zip(given, ins, strict=True) if t is not None and t.is_param)
    kept.update(o.name for o in graph.output if metas.get(o.name) is not None and metas[o.name].is_param)
    return kept


def _weights(metas, precision: Precision, kept: set[str] | None = None) -> int:
    total = 0
    for name, m in metas.items():
        if not m.is_param or (kept is not None and name not in kept):
            continue
        if precision == Precision.INT8:  # float tensors of 2+ dimensions at 1 byte, vectors (biases) as they are
            total += m.nbytes_at(1) if m.shape is not None and len(m.shape) >= 2 else m.nbytes
        else:
            total += m.nbytes_at(float_bytes(precision))
    return total


def _weight_kinds(graph, metas, precision: Precision, kept: set[str]) -> dict[str, int]:
    """Bytes of the weights stored in the file, of every weight kept after folding, and of the Conv weights."""
    stored = {i.name for i in graph.initializer} | {o for n in graph.node if n.op_type == "Constant" for o in n.output}
    conv = {n.input[1] for n in graph.node if n.op_type == "Conv" and len(n.input) > 1}
    return {"stored": _weights(metas, precision, kept & stored), "kept": _weights(metas, precision, kept),
            "conv": _weights(metas, precision, kept & conv)}


def activation_sizes(graph, metas, precision: Precision, backend: str, micro: bool = False) -> dict[str, int]:
    """Bytes of each activation as ``backend`` holds it at ``precision``. INT8: 1 byte where the tensor is written
    and read only by ops the runtime runs in INT8 (its memory facts' ``int8_ops``; a runtime that names none runs
    every op so, as LiteRT's full-integer models do); a tensor a float op writes or reads, and the graph's float
    inputs and outputs, stay at 4 bytes (the runtime dequantizes it around that op)."""
    from edgeopt.memory.facts import activations_at_precision, int8_ops

    acts = {n: m for n, m in metas.items() if not m.is_param}
    if precision != Precision.INT8:
        wide = float_bytes(precision) if activations_at_precision(backend, micro) else 4
        return {n: m.nbytes_at(wide) for n, m in acts.items()}
    ops = int8_ops(backend, micro)
    if ops is None:
        return {n: m.nbytes_at(1) for n, m in acts.items()}
    touches = {n: [] for n in acts}  # the op types that write or read each activation
    for node in graph.node:
        for n in (*node.input, *node.output):
            if n in touches:
                touches[n].append(node.op_type)
    edges = {i.name for i in graph.input} | {o.name for o in graph.output}
    return {n: m.nbytes_at(1 if n not in edges and touches[n] and all(t in ops for t in touches[n]) else 4)
            for n, m in acts.items()}


def _runtime_counts(graph, sizes: dict[str, int], plan, microcontroller: bool) -> tuple[int, int]:
    """(tensors, ops) the runtime keeps a struct (or a compiled kernel) for. On a microcontroller, as the
    ``.tflite`` holds them: the ops left once in-place ops are fused into the op before, plus a QUANTIZE and a
    DEQUANTIZE at the float io; the tensors: one per activation buffer, a weight and a bias per Conv/Gemm/MatMul,
    and the float io tensors."""
    if not microcontroller:  # the ops it compiles: Constant nodes are weights, not ops
        return len(sizes), sum(n.op_type != "Constant" for n in graph.node)
    io = len([i for i in graph.input if i.name in sizes]) + len(graph.output)
    weighted = sum(n.op_type in ("Conv", "Gemm", "MatMul") for n in graph.node)
    return plan.buffers + 2 * weighted + io, len(graph.node) - plan.in_place + 2


def predict_memory(model, backend: str, precision: Precision | str, *, input_shapes=None,
                   microcontroller: bool = False) -> MemoryPrediction:
    """The prediction for an ONNX model (path or ``ModelProto``) built for ``backend`` at ``precision``
    (``microcontroller``: TFLite Micro, weights in flash)."""
    from edgeopt.analyze.shapes import resolve_shapes
    from edgeopt.memory.constants import constant_keys, distinct
    from edgeopt.memory.facts import arena_region, identical_constants_once, runtime_base, weight_copies
    from edgeopt.memory.plan import plan_arena
    from edgeopt.model import batch_defaults, fix_input_shapes, load_onnx

    precision = Precision(precision)
    proto = load_onnx(model) if isinstance(model, (str, os.PathLike)) else model
    given = dict(input_shapes or {})
    fixed = fix_input_shapes(proto, {**batch_defaults(proto, given), **given}, origin="model")
    metas, _, _ = resolve_shapes(fixed, "model")
    kept = fold_constants(fixed.graph, metas)
    runtime, micro = str(backend), microcontroller
    held = distinct(kept, constant_keys(fixed.graph, {n for n, m in metas.items() if m.is_param})) \
        if identical_constants_once(runtime, micro) else kept  # the model as read holds these; its kernels copy all kept
    sizes = activation_sizes(fixed.graph, metas, precision, runtime, micro)
    plan = plan_arena(fixed.graph, sizes)
    weights = _weights(metas, precision, held)
    tensors, nodes = _runtime_counts(fixed.graph, sizes, plan, microcontroller)
    base, source = runtime_base(runtime, micro=micro, tensors=tensors, nodes=nodes,
                                int8=precision == Precision.INT8)
    copies = weight_copies(runtime, micro=micro, arena=arena_region(runtime, plan.arena_bytes, micro),
                           int8=precision == Precision.INT8, **_weight_kinds(fixed.graph, metas, precision, kept))
    ram = plan.arena_bytes + base + copies + (0 if microcontroller else weights)
    return MemoryPrediction(
        backend=str(backend), precision=precision.value, weights_bytes=weights, arena_bytes=plan.arena_bytes,
        runtime_bytes=base + copies, runtime_copies_bytes=copies, total_bytes=ram, weights_in_flash=microcontroller,
        flash_bytes=weights if microcontroller else None, runtime_source=source, live_bytes=plan.live_bytes,
        node_names=plan.node_names, notes=[NOTES],
    )
