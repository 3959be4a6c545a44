"""Each runtime's base memory cost, measured once here and stored with its source and date.

``bytes``: peak RSS of a child process after importing the runtime, loading the 8x8 digits CNN (25k
parameters) and running it, minus RSS before the import, minus that model's predicted weights and arena
(``bench/memory_fit.py --base`` re-measures). TFLite Micro's figure is its own allocator's persistent
allocations besides the arena plan (interpreter, tensor and node structs), read from its recording
allocator, per tensor and per node (digits CNN INT8: tail 4304 bytes = 504 for 21 eval tensors, 128 for the
io tensors, 576 node structs and 2392 kernel buffers for 9 ops).
"""

from __future__ import annotations

MEASURED_ON = "AMD EPYC (AVX-512 VNNI/BF16), Linux x86_64, Python 3.11"

RUNTIME_BASE: dict[str, dict] = {
    "onnxruntime": {"bytes": 45_540_000, "date": "2026-12-04", "version": "onnxruntime 1.32"},
    "openvino": {"bytes": 87_150_000, "date": "2026-12-04", "version": "openvino 2026.4.1"},
    "tflite": {"bytes": 20_400_000, "date": "2026-12-04", "version": "ai-edge-litert 2.3.0"},
    "tflite-micro": {"bytes": 128, "per_tensor_bytes": 24, "per_node_bytes": 330, "date": "2026-12-04",
                     "version": "tflite-micro 0.dev20261023182759"},
}


def runtime_base(runtime: str, *, tensors: int = 0, nodes: int = 0) -> tuple[int, str]:
    """(bytes, where the figure comes from) for ``runtime``; an unknown runtime counts 0 and says so."""
    fact = RUNTIME_BASE.get(runtime)
    if fact is None:
        return 0, f"{runtime}: no measured base cost (counted as 0)"
    n = fact["bytes"] + fact.get("per_tensor_bytes", 0) * tensors + fact.get("per_node_bytes", 0) * nodes
    return int(n), f"measured {fact['date']}, {fact['version']}, {MEASURED_ON}"
