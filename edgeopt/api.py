"""The functions the CLI calls: each returns a typed result the CLI only prints."""

from __future__ import annotations

import os
from pathlib import Path

from edgeopt.profiles import (
    DeviceProfile,
    available_profiles,
    load_profile,
    load_profile_file,
)

__all__ = ["load_profile", "list_profiles", "validate_profile", "doctor", "analyze"]  # + the lazy names below


def list_profiles(profile_dirs: list[str | os.PathLike] | None = None) -> dict[str, str]:
    """Profile names and where each comes from."""
    return available_profiles(profile_dirs)


def validate_profile(path: str | os.PathLike) -> DeviceProfile:
    """Load a user's profile file; raises BadProfileError on any problem."""
    return load_profile_file(Path(path))


def doctor(full: bool = False) -> dict:
    """Installed runtimes and versions, tools (with apt packages), this host's CPU and memory.

    Imports only the fast runtimes unless ``full`` (see :func:`edgeopt.doctor.doctor_report`)."""
    from edgeopt.doctor import doctor_report

    return doctor_report(full)


def analyze(model, profile="host", *, input_shapes=None, profile_dirs=None):
    """Roofline analysis of ``model`` on ``profile`` (see :mod:`edgeopt.analyze`)."""
    from edgeopt.analyze import analyze_model

    prof = profile if isinstance(profile, DeviceProfile) else load_profile(profile, profile_dirs)
    return analyze_model(model, prof, input_shapes=input_shapes)


# The other verbs' API functions live beside their logic; they are re-exported here (lazily, so that
# ``import edgeopt`` stays light) so that ``edgeopt.api`` is the one place a Python user looks.
_LAZY = {
    "convert": ("edgeopt.convert_on_device", "convert"),  # edgeopt.convert.convert + --verify-on
    "load_artifact": ("edgeopt.artifact", "load_artifact"),
    "make_plan": ("edgeopt.plan", "make_plan"),
    "bench_artifacts": ("edgeopt.bench.api", "bench_artifacts"),
    "bench_model": ("edgeopt.bench.model", "bench_model"),
    "store_run": ("edgeopt.results", "store_run"),
    "list_runs": ("edgeopt.results", "list_runs"),
    "compare_runs": ("edgeopt.results", "compare_runs"),
    "build_report": ("edgeopt.report", "build_report"),
    "remote_bench": ("edgeopt.remote.bench", "remote_bench"),
    "remote_bench_many": ("edgeopt.remote.bench", "remote_bench_many"),
    "tune": ("edgeopt.tune", "tune"),
    "tune_plan": ("edgeopt.tune", "tune_plan"),
    "run_pipeline": ("edgeopt.pipeline.run", "run_pipeline"),
    "optimize": ("edgeopt.optimize.optimizer", "optimize"),
    "ChainRequest": ("edgeopt.options", "ChainRequest"),  # the typed options convert/remote_bench take
    "ConvertOptions": ("edgeopt.options", "ConvertOptions"),
    "BenchOptions": ("edgeopt.bench.api", "BenchOptions"),
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    raise AttributeError(f"module 'edgeopt.api' has no attribute {name!r}")
__all__ += list(_LAZY)
