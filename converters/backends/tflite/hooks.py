"""What the core asks of the TFLite/LiteRT backend besides converting (see ``converters/hooks.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.converters.hooks import BackendHooks

from .memory_facts import MEMORY


class TFLiteHooks(BackendHooks):
    consumer = "edgeopt.converters.backends.tflite.consumer"
    memory = MEMORY
    # TensorFlow and onnx2tf log under their own names and those of what they import (absl, h5py, jax)
    host_rank = 20
    emulated = True
    loggers = ("tensorflow", "onnx2tf", "absl", "h5py", "jax")
    fast_imports = frozenset({"ai_edge_litert"})
    unit_suffixes = (".tflite",)
    model_file_suffixes = (".tflite",)
    prefix_timer_limit = 6  # each prefix timed is an onnx2tf conversion (a TensorFlow start, seconds)
    firmware_c_array = True  # TFLite Micro runs the .tflite flatbuffer linked into the firmware

    def check_source(self, model: Path, settings: dict, profile_name: str) -> None:
        if "micro" in settings:  # TFLM's op set, before the slow conversion
            from .micro.onnx_ops import check_onnx_for_tflm

            check_onnx_for_tflm(model, profile_name)

    def prefix_timer(self, int8: bool, calib: Any, work: Path) -> tuple[Any, str] | None:
        from .prefix_time import prefix_timer

        return prefix_timer(int8, calib, work)

    def host_runtime(self, arch: str, cores: int) -> dict | None:
        return {"name": "tflite", "settings": {"delegate": "xnnpack", "threads": cores}}

    def wrapped(self, path: Path, threads: int | None) -> dict:
        from .wrapped import wrapped_facts

        return wrapped_facts(path, threads)

    def units(self, model: Any) -> tuple[int, int] | None:
        if not isinstance(model, (str, Path)) or Path(model).suffix.lower() not in self.unit_suffixes:
            return None
        from .unit_count import tflite_units

        return tflite_units(Path(model))


HOOKS = TFLiteHooks()
