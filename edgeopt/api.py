"""The functions the CLI calls: each returns a typed result the CLI only prints."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from edgeopt.deps import version_of
from edgeopt.profiles import (
    DeviceProfile,
    available_profiles,
    load_profile,
    load_profile_file,
)

__all__ = ["load_profile", "list_profiles", "validate_profile", "doctor", "analyze"]


def list_profiles(profile_dirs: list[str | os.PathLike] | None = None) -> dict[str, str]:
    """Profile names and where each comes from."""
    return available_profiles(profile_dirs)


def validate_profile(path: str | os.PathLike) -> DeviceProfile:
    """Load a user's profile file; raises BadProfileError on any problem."""
    return load_profile_file(Path(path))


# Runtimes edgeopt can use: (import name, distribution, extra)
RUNTIMES = (
    ("onnxruntime", "onnxruntime", None),
    ("onnxslim", "onnxslim", None),
    ("openvino", "openvino", "openvino"),
    ("nncf", "nncf", "openvino"),
    ("ai_edge_litert", "ai-edge-litert", "tflite"),
    ("onnx2tf", "onnx2tf", "tflite"),
    ("tensorflow", "tensorflow", "tflite"),
    ("tvm", "apache-tvm", "tvm"),
    ("paramiko", "paramiko", "remote"),
    ("torch", "torch", None),
)


def doctor(check_imports: bool = True) -> dict:
    """Which backends and runtimes are installed (and import), their versions, and this host's CPU."""
    import importlib
    import shutil

    from edgeopt import __version__
    from edgeopt.host import cpu_facts

    runtimes = []
    for mod, dist, extra in RUNTIMES:
        ver = version_of(dist)
        entry = {"name": dist, "module": mod, "version": ver, "installed": ver is not None, "extra": extra}
        if ver is not None and check_imports and mod not in ("tensorflow",):
            try:
                importlib.import_module(mod)
                entry["imports"] = True
            except Exception as err:  # noqa: BLE001 - report, don't fail
                entry["imports"] = False
                entry["import_error"] = f"{type(err).__name__}: {str(err)[:160]}"
        runtimes.append(entry)
    tools = {t: shutil.which(t) for t in ("aarch64-linux-gnu-g++", "qemu-aarch64-static", "sshd", "gcc")}
    return {
        "edgeopt": __version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_facts(),
        "runtimes": runtimes,
        "tools": tools,
    }


def analyze(model, profile="host", *, input_shapes=None, profile_dirs=None):
    """Roofline analysis of ``model`` on ``profile`` (see :mod:`edgeopt.analyze`)."""
    from edgeopt.analyze import analyze_model

    prof = profile if isinstance(profile, DeviceProfile) else load_profile(profile, profile_dirs)
    return analyze_model(model, prof, input_shapes=input_shapes)
