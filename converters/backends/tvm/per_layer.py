"""TVM's per-kernel times (the Relax VM's call instrument) and their match to the ONNX nodes."""

from __future__ import annotations

import re
from collections import defaultdict

# TVM 0.27 has no VM profiler: the Relax VM's ``profile=True`` / ``vm.profile()`` and ``tvm.runtime.profiling``
# were removed (tvm/runtime/vm.py has no ``profile``; libtvm_runtime.so has no profiler VM). What the VM keeps is
# ``set_instrument``: a callback run before and after every Call instruction with the callee's symbol (a
# PrimFunc kernel such as ``conv2d1``/``fused_conv2d_add_relu``, or a ``vm.builtin.*``). It works on a library
# loaded from disk, so the per-kernel time here is wall time between the two callbacks (device synced
# first when not a CPU); each carries the callback's own cost, measured as ``instrument_overhead_us`` (the
# median time of ``vm.builtin.null_value``, which does nothing).
_TVM_TO_ONNX = {
    "conv1d": ("Conv",), "conv2d": ("Conv",), "conv3d": ("Conv",), "conv2d_transpose": ("ConvTranspose",),
    "conv1d_transpose": ("ConvTranspose",), "matmul": ("MatMul", "Gemm"), "dense": ("Gemm", "MatMul"),
    "add": ("Add",), "subtract": ("Sub",), "multiply": ("Mul",), "divide": ("Div",), "relu": ("Relu",),
    "sigmoid": ("Sigmoid",), "tanh": ("Tanh",), "clip": ("Clip",), "exp": ("Exp",), "erf": ("Erf",),
    "sqrt": ("Sqrt",), "power": ("Pow",), "max_pool2d": ("MaxPool",), "max_pool1d": ("MaxPool",),
    "avg_pool2d": ("AveragePool",), "adaptive_avg_pool2d": ("GlobalAveragePool",),
    "mean": ("GlobalAveragePool", "ReduceMean"), "sum": ("ReduceSum",), "max": ("ReduceMax", "GlobalMaxPool"),
    "softmax": ("Softmax",), "log_softmax": ("LogSoftmax",), "transpose": ("Transpose",), "reshape": ("Reshape",),
    "concatenate": ("Concat",), "take": ("Gather",), "strided_slice": ("Slice",), "layer_norm": ("LayerNormalization",),
    "batch_norm": ("BatchNormalization",), "resize2d": ("Resize",), "split": ("Split",), "where": ("Where",),
    "hardswish": ("HardSwish",), "gelu": ("Gelu",), "leakyrelu": ("LeakyRelu",), "prelu": ("PRelu",),
}


def tvm_kernel_op(symbol: str) -> str:
    """The first op of a TVM kernel name: ``fused_conv2d_add_relu`` -> conv2d, ``add4`` -> add."""
    if symbol.startswith("vm.builtin."):
        return "vm.builtin"
    stem = re.sub(r"\d+$", "", symbol.removeprefix("fused_"))
    best = ""
    for op in _TVM_TO_ONNX:
        if (stem == op or stem.startswith(op + "_")) and len(op) > len(best):
            best = op
    return best or stem


def profile_tvm(artifact_dir: str, manifest: dict, feeds: dict, *, threads: int | None = None,
                runs: int = 20) -> tuple[list[dict], dict]:
    """Mean wall time per TVM kernel from the Relax VM's call instrument (loaded as ``Runner`` loads it)."""
    import time

    from edgeopt.runtime.runners.tvm import Runner

    runner = Runner(artifact_dir, manifest, threads=threads)
    try:
        runner.run(feeds)  # warm-up, not instrumented
        dev = runner.device
        sync = dev.sync if dev.dlpack_device_type() != runner._tvm.cpu(0).dlpack_device_type() else None  # noqa: SLF001
        total: dict[str, int] = defaultdict(int)
        calls: dict[str, int] = defaultdict(int)
        order: dict[str, int] = {}
        started: list[int] = []

        def instrument(func, symbol, before_run, ret_value, *args):  # noqa: ANN001, ARG001 - the VM's signature
            if sync is not None:
                sync()
            now = time.perf_counter_ns()
            if before_run:
                started.append(now)
            elif started:
                total[symbol] += now - started.pop()
                calls[symbol] += 1
                order.setdefault(symbol, len(order))
            return 0  # VMInstrumentReturnKind.NO_OP

        runner.vm.set_instrument(instrument)
        for _ in range(runs):
            runner.run(feeds)
        runner.vm.set_instrument(None)
    finally:
        runner.close()
    noop = total.get("vm.builtin.null_value")
    rows = [{"name": s, "op_type": tvm_kernel_op(s), "measured_us": total[s] / 1e3 / runs,
             "calls_per_run": calls[s] / runs} for s in sorted(order, key=order.get)]
    facts = {"library": runner.library_file, "timer": "relax VM set_instrument (wall time per Call; TVM 0.27 has no "
             "VM profiler)", "kernels": sum(1 for r in rows if r["op_type"] != "vm.builtin"),
             "instrument_overhead_us": round(noop / 1e3 / calls["vm.builtin.null_value"], 3) if noop else None}
    return rows, facts


def match_by_op_type(measured: list[dict], predicted: list[dict]) -> str:
    """Give each TVM kernel the ONNX node it stands for (``onnx_node``) where that is unambiguous.

    A kernel's first op maps to ONNX op types; within a type, kernels (in call order, each called once a
    run) pair with ONNX nodes (in graph order) only when both counts are equal.
    """
    present: dict[str, list[str]] = defaultdict(list)
    for p in predicted:
        present[p.get("op_type", "")].append(p["name"])
    groups: dict[str, list[dict]] = defaultdict(list)
    for m in measured:
        onnx_type = next((t for t in _TVM_TO_ONNX.get(m["op_type"], ()) if t in present), None)
        if onnx_type and m.get("calls_per_run", 1) == 1:
            groups[onnx_type].append(m)
    for onnx_type, kernels in groups.items():
        if len(kernels) == len(present[onnx_type]):
            for m, node in zip(kernels, present[onnx_type], strict=True):
                m["onnx_node"] = node
    return "op type and order"

MATCHED_HOW = "by op type and order (a kernel's first op; fused kernels are compared with that one node's roof)"


def match_kernels(measured: list[dict], predicted: list[dict]) -> tuple[str, str]:
    """The per-layer matcher (``per_layer_matcher``): :func:`match_by_op_type`, and how it matched, for the note."""
    return match_by_op_type(measured, predicted), MATCHED_HOW
