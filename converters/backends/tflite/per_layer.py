"""A TFLite artifact's op breakdown, without times.

ai-edge-litert 2.3's Python wheel exposes no per-op timer. ``InterpreterWrapper`` binds no profiler (its methods
are tensor/node accessors, Invoke, ModifyGraphWithDelegate), ``CompiledModel`` has no profiling option or
accessor, ``tools/benchmark_litert_model.py`` times whole runs only, no ``benchmark_model`` binary ships in the
wheel, and no environment variable turns the C++ profiler on. So a TFLite artifact gets the static op breakdown
from ``Interpreter._get_ops_details()`` (op types, counts, order) and ``available: False``; per-op times need
TFLite's ``benchmark_model --enable_op_profiling`` built from source.
"""

from __future__ import annotations

import os
from collections import defaultdict

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


def per_layer_tflite(artifact_dir: str, manifest: dict, feeds: dict | None = None, *, threads: int | None = None,
                     runs: int = 0) -> dict:
    """No per-op times: the ``available: False`` row with the static op breakdown (``feeds``, ``threads`` and
    ``runs``, the profilers' arguments, are not used)."""
    out: dict = {"available": False, "backend": "tflite", "note": TFLITE_NOT_AVAILABLE}
    try:
        out["static_ops"] = tflite_static_ops(artifact_dir, manifest)
    except Exception as err:  # noqa: BLE001 - the breakdown is a courtesy, the row still stands
        out["static_ops_error"] = f"{type(err).__name__}: {str(err)[:200]}"
    return out
