"""What the core asks of the ONNX Runtime backend besides converting (see ``converters/hooks.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.converters.hooks import BackendHooks

from .memory_facts import MEMORY

TENSORRT = "TensorrtExecutionProvider"


class OnnxRuntimeHooks(BackendHooks):
    consumer = "edgeopt.converters.backends.onnxruntime.consumer"
    memory = MEMORY
    host_rank = 10
    emulated = True
    loggers = ("onnxruntime",)
    fast_imports = frozenset({"onnxruntime"})
    fp32_reference = "ONNX Runtime FP32"
    as_loaded_suffix = ".as-loaded.onnx"
    places = True
    interleaved_settings = {"allow_spinning": False}

    def prefix_timer(self, int8: bool, calib: Any, work: Path) -> tuple[Any, str] | None:
        from .prefix_time import prefix_timer

        return prefix_timer(int8, calib, work)

    def host_runtime(self, arch: str, cores: int) -> dict | None:
        return {"name": "onnxruntime", "settings": {"provider": "CPUExecutionProvider", "threads": cores}}

    def library_facts(self, module: str, imported: Any) -> dict:
        return {"providers": list(imported.get_available_providers())} if module == "onnxruntime" else {}

    def as_loaded(self, artifact_dir: Path, manifest: dict, out: Path) -> dict:
        from .as_loaded import as_loaded

        return as_loaded(artifact_dir, manifest, out)[0]

    def as_loaded_lines(self, facts: dict) -> list[str]:
        lines = []
        if facts["disabled_optimizers"]:
            lines.append("  disabled optimizers: " + ", ".join(facts["disabled_optimizers"]))
        if facts["qdq_by_dtype"]:
            lines.append("  Q/DQ by dtype: " + ", ".join(f"{k} {v}" for k, v in facts["qdq_by_dtype"].items()))
        int32 = facts["int32_dq"]
        lines.append(f"  int32 DequantizeLinear: {len(int32)}" +
                     (f" ({', '.join(int32[:4])}{'…' if len(int32) > 4 else ''})" if int32 else ""))
        if facts["nodes_per_provider"]:
            lines.append("  nodes per provider (checked with " + facts["assignment_checked_with"] + "): " +
                         ", ".join(f"{k} {v}" for k, v in facts["nodes_per_provider"].items()))
        return lines

    def runtime_settings(self, settings: dict) -> dict:
        """TensorRT gets WeightBiasQuantization left off (what the backend writes for it)."""
        from .as_loaded_check import WEIGHT_BIAS_QUANTIZATION

        if settings.get("provider") == TENSORRT:
            return {**settings, "disabled_optimizers": [WEIGHT_BIAS_QUANTIZATION]}
        return dict(settings)

    def placement(self, model_path: Path, settings: dict, unit: str, bandwidth_gbps: float | None) -> dict | None:
        from .placement import ort_placement

        return ort_placement(model_path, settings, target_unit=unit, bandwidth_gbps=bandwidth_gbps)


HOOKS = OnnxRuntimeHooks()
