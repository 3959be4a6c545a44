"""Per-layer times from the backends' own profilers, joined with the roofline's per-op predictions.

ONNX Runtime: ``SessionOptions.enable_profiling`` writes a Chrome-trace JSON whose ``Node``
events named ``<node>_kernel_time`` carry each kernel's duration (us). OpenVINO: compile with
``PERF_COUNT`` and read ``InferRequest.profiling_info`` (``real_time`` per node). TVM: see
``profile_tvm``. Other backends say "not available for <backend>". Times are means over
``runs`` inferences.

TFLite (ai-edge-litert 2.3): the Python wheel exposes no per-op timer. ``InterpreterWrapper`` binds no
profiler (its methods are tensor/node accessors, Invoke, ModifyGraphWithDelegate), ``CompiledModel`` has
no profiling option or accessor, ``tools/benchmark_litert_model.py`` times whole runs only, no
``benchmark_model`` binary ships in the wheel, and no environment variable turns the C++ profiler on.
So a TFLite artifact gets the static op breakdown from ``Interpreter._get_ops_details()`` (op types,
counts, order) and ``available: False``; per-op times need TFLite's ``benchmark_model
--enable_op_profiling`` built from source.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections import defaultdict

from edgeopt.deps import require


def _runtime_feeds(manifest: dict, feeds: dict) -> dict:
    from edgeopt.runtime.runners.base import Runner

    io = {x["name"]: x for x in (manifest["runtime"].get("io") or {}).get("inputs") or []}
    out = {}
    for name, arr in feeds.items():
        spec = io.get(name, {"runtime_name": name, "transpose": None})
        out[spec.get("runtime_name", name)] = Runner.to_runtime_layout(arr, spec)
    return out


def parse_ort_trace(events: list[dict], runs: int) -> list[dict]:
    """Mean kernel time per node from an ONNX Runtime profile (list of trace events)."""
    total: dict[str, float] = defaultdict(float)
    op_type: dict[str, str] = {}
    for e in events:
        name = e.get("name", "")
        if e.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        node = name[: -len("_kernel_time")]
        total[node] += float(e.get("dur", 0))
        op_type[node] = (e.get("args") or {}).get("op_name", "")
    return [{"name": n, "op_type": op_type[n], "measured_us": t / max(runs, 1)} for n, t in total.items()]


def profile_onnxruntime(artifact_dir: str, manifest: dict, feeds: dict, *, threads: int | None = None,
                        runs: int = 20) -> list[dict]:
    ort = require("onnxruntime", "per-layer profiling")
    settings = manifest["runtime"].get("settings", {})
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.enable_profiling = True
    level = settings.get("graph_optimization_level", "ORT_ENABLE_ALL")
    so.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    if threads:
        so.intra_op_num_threads = threads
    with tempfile.TemporaryDirectory(prefix="edgeopt-prof-") as tmp:
        so.profile_file_prefix = os.path.join(tmp, "ort")
        sess = ort.InferenceSession(os.path.join(artifact_dir, manifest["runtime"]["model"]), so,
                                    providers=["CPUExecutionProvider"])
        rt_feeds = _runtime_feeds(manifest, feeds)
        for _ in range(runs + 1):
            sess.run(None, rt_feeds)
        with open(sess.end_profiling()) as f:
            events = json.load(f)
    # the first run is a warm-up: drop each node's first kernel event
    seen: set[str] = set()
    kept = []
    for e in events:
        name = e.get("name", "")
        if e.get("cat") == "Node" and name.endswith("_kernel_time") and name not in seen:
            seen.add(name)
            continue
        kept.append(e)
    return parse_ort_trace(kept, runs)


def profile_openvino(artifact_dir: str, manifest: dict, feeds: dict, *, threads: int | None = None,
                     runs: int = 20) -> list[dict]:
    ov = require("openvino", "per-layer profiling")
    settings = manifest["runtime"].get("settings", {})
    core = ov.Core()
    config = {"PERF_COUNT": True}
    if threads:
        config["INFERENCE_NUM_THREADS"] = int(threads)
    if settings.get("inference_precision"):
        config["INFERENCE_PRECISION_HINT"] = settings["inference_precision"]
    model = core.read_model(os.path.join(artifact_dir, manifest["runtime"]["model"]))
    compiled = core.compile_model(model, settings.get("device", "CPU"), config)
    req = compiled.create_infer_request()
    rt_feeds = _runtime_feeds(manifest, feeds)
    req.infer(rt_feeds)
    total: dict[str, float] = defaultdict(float)
    kinds: dict[str, str] = {}
    for _ in range(runs):
        req.infer(rt_feeds)
        for p in req.profiling_info:
            if str(p.status).endswith("NOT_RUN"):
                continue
            total[p.node_name] += p.real_time.total_seconds() * 1e6
            kinds[p.node_name] = f"{p.node_type} ({p.exec_type})"
    return [{"name": n, "op_type": kinds[n], "measured_us": t / runs} for n, t in total.items()]


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


def profiler_for(backend: str):
    """The backend's per-op profiler, named by its class (``per_layer_profiler``), or None."""
    from edgeopt.converters.registry import get_backend, resolve

    try:
        ref = get_backend(backend).per_layer_profiler
    except Exception:  # noqa: BLE001 - an unknown backend has no profiler
        return None
    return resolve(ref) if ref else None

TFLITE_NOT_AVAILABLE = (
    "per-layer times are not available for tflite: ai-edge-litert's Python API has no op profiler "
    "(Interpreter/InterpreterWrapper bind none, CompiledModel has no profiling option, the wheel ships no "
    "benchmark_model binary, no env var enables it); per-op times need TFLite's benchmark_model "
    "--enable_op_profiling built from source. static_ops lists the graph's ops (types, counts) instead")


def tflite_static_ops(artifact_dir: str, manifest: dict) -> dict:
    """Op types, counts and execution order of a .tflite model, from ``Interpreter._get_ops_details()``."""
    from edgeopt.runtime.runners.tflite import open_interpreter

    interp = open_interpreter(os.path.join(artifact_dir, manifest["runtime"]["model"]), threads=1)
    ops = [{"index": int(d["index"]), "op_type": str(d["op_name"]),
            "inputs": [int(i) for i in d["inputs"]], "outputs": [int(i) for i in d["outputs"]]}
           for d in interp._get_ops_details()]  # noqa: SLF001 - the only op listing LiteRT's Python API has
    # after allocate_tensors the list also holds the delegate kernels (op_name "DELEGATE") appended by XNNPACK
    delegates = [op for op in ops if op["op_type"] == "DELEGATE"]
    ops = [op for op in ops if op["op_type"] != "DELEGATE"]
    counts: dict[str, int] = defaultdict(int)
    for op in ops:
        counts[op["op_type"]] += 1
    by_type = [{"op_type": t, "count": c} for t, c in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))]
    return {"count": len(ops), "by_type": by_type, "ops": ops, "delegate_kernels": len(delegates),
            "note": "static: the model's op list (no times); at run time XNNPACK executes the ops it supports "
                    f"inside {len(delegates)} DELEGATE kernel(s)"}


def per_layer_tflite(artifact_dir: str, manifest: dict) -> dict:
    out: dict = {"available": False, "backend": "tflite", "note": TFLITE_NOT_AVAILABLE}
    try:
        out["static_ops"] = tflite_static_ops(artifact_dir, manifest)
    except Exception as err:  # noqa: BLE001 - the breakdown is a courtesy, the row still stands
        out["static_ops_error"] = f"{type(err).__name__}: {str(err)[:200]}"
    return out


def join_with_predictions(measured: list[dict], predicted: list[dict]) -> list[dict]:
    """Measured vs roofline-predicted time per op, ops furthest above their roof first.

    ``predicted``: ``{"name", "predicted_us", "bound"?}``. Ops without a prediction come last.
    """
    pred = {p["name"]: p for p in predicted}
    rows = []
    for m in measured:  # a TVM kernel names the ONNX node it was matched to in "onnx_node"
        p = pred.get(m.get("onnx_node") or m["name"])
        pu = p.get("predicted_us") if p else None
        ratio = m["measured_us"] / pu if pu else None
        rows.append({**m, "predicted_us": pu, "bound": (p or {}).get("bound"), "measured_over_predicted": ratio})
    return sorted(rows, key=lambda r: (r["measured_over_predicted"] is None, -(r["measured_over_predicted"] or 0),
                                       -r["measured_us"]))


def roofline_predictions(model_path: str, profile_name: str | None) -> tuple[list[dict] | None, str | None]:
    """Per-op roofline times from ``edgeopt.analyze`` (estimate), or (None, why not)."""
    try:
        from edgeopt.analyze import analyze_model
        from edgeopt.profiles import load_profile

        res = analyze_model(model_path, load_profile(profile_name or "host"), preflight=False)
    except ImportError:
        return None, "edgeopt.analyze is not available"
    except Exception as err:  # noqa: BLE001 - the join is optional
        return None, f"roofline analysis failed: {type(err).__name__}: {str(err)[:160]}"
    return [{"name": o.name, "op_type": o.op_type, "predicted_us": o.time_us, "bound": o.bound.value}
            for o in res.ops], None


def per_layer_for_artifact(artifact_dir: str, manifest: dict, feeds: dict, *, threads: int | None = None,
                           profile: str | None = None, runs: int = 20) -> dict:
    backend = manifest["runtime"]["backend"]
    fn = profiler_for(backend)
    if fn is None:
        return {"available": False, "note": f"per-layer times are not available for {backend}"}
    if fn is per_layer_tflite:  # no timings: a static breakdown, said as such
        return per_layer_tflite(artifact_dir, manifest)
    measured = fn(artifact_dir, manifest, feeds, threads=threads, runs=runs)
    extra: dict = {}
    if isinstance(measured, tuple):  # (rows, backend-specific facts)
        measured, extra = measured
    out = {"available": True, "backend": backend, "runs": runs, "total_measured_us": sum(m["measured_us"] for m in measured),
           **extra}
    model_file = os.path.join(artifact_dir, manifest["runtime"]["model"])
    onnx_model = model_file if model_file.endswith(".onnx") else (manifest.get("source_model") or {}).get("path")
    predicted, why = roofline_predictions(onnx_model, profile) if onnx_model else (None, "no ONNX model to analyze")
    if predicted is not None and backend == "tvm":
        out["matched_by"] = match_by_op_type(measured, predicted)
    if predicted is None:
        out["ops"] = sorted(measured, key=lambda m: -m["measured_us"])
        out["note"] = f"no roofline join: {why}"
    else:
        out["ops"] = join_with_predictions(measured, predicted)
        matched = sum(1 for o in out["ops"] if o["predicted_us"] is not None)
        out["matched"] = matched
        how = ("by op type and order (a kernel's first op; fused kernels are compared with that one node's roof)"
               if backend == "tvm" else "by name (fused/renamed ones did not)")
        out["note"] = (f"predicted_us is the roofline estimate at FP32 on the profile's primary unit; {matched} of "
                       f"{len(measured)} measured ops matched an ONNX node {how}")
    return out
