"""The placement report for a model before it is converted (the profile's first backend, ``analyze``) and for an
artifact (``bench``, the convert gate)."""

from __future__ import annotations

from pathlib import Path

from edgeopt.errors import EdgeoptError


def _placed() -> dict:
    """backend name -> hooks, for the backends whose placement is asked or predicted."""
    from edgeopt.converters.registry import backend_hooks

    return {b.value: h for b, h in backend_hooks().items() if h.places}


def _bandwidth(profile) -> float | None:
    return getattr(getattr(profile, "memory", None), "bandwidth_gbps", None)


def settings_for(backend: str, settings: dict) -> dict:
    """The runtime settings a backend's artifact will have for a profile's ``settings`` (its hooks say)."""
    from edgeopt.converters.registry import hooks_of

    return hooks_of(backend).runtime_settings(settings)


def placement_of(model_path: str | Path, backend: str, settings: dict, unit: str, profile=None) -> dict | None:
    """The report for ``model_path`` (ONNX, or the backend's own model file) under ``backend`` with ``settings`` on
    ``unit``; None for a backend that reports no placement."""
    hooks = _placed().get(backend)
    return hooks.placement(Path(model_path), settings, unit, _bandwidth(profile)) if hooks else None


def model_placement(model_path: str | Path, profile) -> dict | None:
    """Before converting: the placement of the source model on the profile's first backend (None where that
    backend reports no placement, or the runtime is not installed)."""
    target = profile.backends[0]
    if target.name.value not in _placed():
        return None
    settings = settings_for(target.name.value, target.settings)
    try:
        return placement_of(model_path, target.name.value, settings, target.unit.value, profile)
    except (ImportError, EdgeoptError):
        return None


def artifact_placement(artifact_dir: str | Path, manifest: dict) -> dict | None:
    """An artifact's placement (None for a backend that reports none)."""
    backend = manifest.get("backend")
    if backend not in _placed():
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
