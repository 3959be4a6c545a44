"""What the core asks of the OpenVINO backend besides converting (see ``converters/hooks.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.converters.hooks import BackendHooks, PlainDefault

from .memory_facts import MEMORY

DEVICE_UNITS = {"NPU": "npu", "GPU": "gpu", "CPU": "cpu"}  # OpenVINO device -> the profile's unit kind


class OpenVINOHooks(BackendHooks):
    consumer = "edgeopt.converters.backends.openvino.consumer"
    memory = MEMORY
    host_rank = 0
    emulated = True
    loggers = ("openvino", "nncf")
    fast_imports = frozenset({"openvino"})
    unit_suffixes = (".xml",)
    fp32_reference = "OpenVINO at INFERENCE_PRECISION_HINT f32"
    as_loaded_suffix = ".as-loaded.xml"
    places = True

    def prefix_timer(self, int8: bool, calib: Any, work: Path) -> tuple[Any, str] | None:
        from .prefix_time import prefix_timer

        return prefix_timer(int8, calib, work)

    def host_runtime(self, arch: str, cores: int) -> dict | None:
        # OpenVINO's CPU plugin is offered for x86 hosts (its ARM build runs, but edgeopt has not measured it)
        return {"name": "openvino", "settings": {"device": "CPU", "threads": cores}} if arch == "x86_64" else None

    def library_facts(self, module: str, imported: Any) -> dict:
        if module != "openvino":
            return {}
        try:
            return {"devices": list(imported.Core().available_devices)}
        except Exception as err:  # noqa: BLE001 - report, don't fail
            return {"devices_error": f"{type(err).__name__}: {str(err)[:160]}"}

    def units(self, model: Any) -> tuple[int, int] | None:
        from .unit_count import graph_units, ir_units, model_graph

        if isinstance(model, (str, Path)):
            return ir_units(Path(model)) if Path(model).suffix.lower() in self.unit_suffixes else None
        return graph_units(*model_graph(model)) if hasattr(model, "get_ordered_ops") else None

    def as_loaded(self, artifact_dir: Path, manifest: dict, out: Path) -> dict:
        from .as_loaded import as_loaded

        return as_loaded(artifact_dir, manifest, out)[0]

    def as_loaded_lines(self, facts: dict) -> list[str]:
        return ["  runtime precision: " + ", ".join(f"{k} {v}" for k, v in facts["runtime_precision"].items())]

    def placement(self, model_path: Path, settings: dict, unit: str, bandwidth_gbps: float | None) -> dict | None:
        from .placement import ov_placement

        device = settings.get("device") or "CPU"
        return ov_placement(model_path, device, target_unit=DEVICE_UNITS.get(device, unit),
                            bandwidth_gbps=bandwidth_gbps)


    def plain_default(self, manifest: dict, bare: dict, profile: Any) -> PlainDefault | None:
        from .consumer import plain_default

        return plain_default(manifest, bare, profile)


HOOKS = OpenVINOHooks()
