"""The placement report for a model before it is converted (the profile's first backend, ``analyze``) and for an
artifact (``bench``, the convert gate)."""

from __future__ import annotations

from pathlib import Path

from edgeopt.errors import EdgeoptError

OV_UNITS = {"NPU": "npu", "GPU": "gpu", "CPU": "cpu"}
PLACED = ("onnxruntime", "openvino")  # the backends whose placement is asked or predicted


def _bandwidth(profile) -> float | None:
    return getattr(getattr(profile, "memory", None), "bandwidth_gbps", None)


def settings_for(backend: str, settings: dict) -> dict:
    """The runtime settings a backend's artifact will have: TensorRT gets WeightBiasQuantization left off."""
    from edgeopt.as_loaded.tensorrt_check import WEIGHT_BIAS_QUANTIZATION

    if backend == "onnxruntime" and settings.get("provider") == "TensorrtExecutionProvider":
        return {**settings, "disabled_optimizers": [WEIGHT_BIAS_QUANTIZATION]}
    return dict(settings)


def placement_of(model_path: str | Path, backend: str, settings: dict, unit: str, profile=None) -> dict | None:
    """The report for ``model_path`` (ONNX, or an IR for OpenVINO) under ``backend`` with ``settings`` on ``unit``."""
    if backend == "onnxruntime":
        from edgeopt.placement.onnxruntime import ort_placement

        return ort_placement(model_path, settings, target_unit=unit, bandwidth_gbps=_bandwidth(profile))
    if backend == "openvino":
        from edgeopt.placement.openvino import ov_placement

        device = settings.get("device") or "CPU"
        return ov_placement(model_path, device, target_unit=OV_UNITS.get(device, unit),
                            bandwidth_gbps=_bandwidth(profile))
    return None


def model_placement(model_path: str | Path, profile) -> dict | None:
    """Before converting: the placement of the source model on the profile's first backend (None where that
    backend is neither ONNX Runtime nor OpenVINO, or the runtime is not installed)."""
    target = profile.backends[0]
    if target.name.value not in PLACED:
        return None
    settings = settings_for(target.name.value, target.settings)
    try:
        return placement_of(model_path, target.name.value, settings, target.unit.value, profile)
    except (ImportError, EdgeoptError):
        return None


def artifact_placement(artifact_dir: str | Path, manifest: dict) -> dict | None:
    """An ONNX Runtime or OpenVINO artifact's placement (None for the other backends)."""
    backend = manifest.get("backend")
    if backend not in PLACED:
        return None
    runtime = manifest["runtime"]
    settings = runtime.get("settings") or {}
    profile = _profile(manifest.get("profile"))
    unit = "cpu"
    if profile is not None:
        unit = next((b.unit.value for b in profile.backends if b.name.value == backend and all(
            settings.get(k) == v for k, v in b.settings.items() if k in ("provider", "device"))), "cpu")
    return placement_of(Path(artifact_dir) / runtime["model"], backend, settings, unit, profile)


def _profile(name: str | None):
    if not name or name == "none":
        return None
    from edgeopt.profiles import load_profile

    try:
        return load_profile(name)
    except EdgeoptError:
        return None
