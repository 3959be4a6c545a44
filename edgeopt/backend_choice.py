"""The backend a plan builds with: the one asked for, else the profile's first installed one; its class, checked
for the libraries it needs (exit 4 naming the extra) before any is imported."""

from __future__ import annotations

import importlib.util

from edgeopt.enums import BackendName
from edgeopt.errors import MissingDependencyError, UsageError


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def backend_class(name: BackendName):
    """The Backend class for ``name``; exit 4 (naming the extra) when its libraries are missing. Backend
    modules import nothing heavy, so the class's ``requires`` is checked (find_spec) before any library is."""
    from edgeopt.converters.registry import BACKEND_MODULES, get_backend

    try:
        cls = get_backend(name)
    except ModuleNotFoundError as e:
        if e.name and BACKEND_MODULES[name].startswith(e.name):
            raise UsageError(f"backend '{name.value}' is not available in this edgeopt build", "use --backend onnxruntime") from e
        raise MissingDependencyError(f"backend '{name.value}' needs {e.name}, which is not installed",
                                     f"install it with: pip install 'edgeopt[{name.value}]'") from e
    absent = [m for m in cls.requires if not _importable(m)]
    if absent:
        how = f"pip install 'edgeopt[{cls.extra}]'" if cls.extra else f"pip install {absent[0]}"
        raise MissingDependencyError(
            f"backend '{name.value}' needs {', '.join(absent)}, which is not installed",
            f"install it with: {how}" + (f" (the '{cls.extra}' extra)" if cls.extra else ""),
        )
    return cls


def choose_backend(profile, requested: str | None, warnings: list[str]) -> BackendName:
    if requested:
        from edgeopt.converters.registry import parse_backend

        name = parse_backend(requested)
        if profile.backend(name) is None:
            listed = ", ".join(b.name.value for b in profile.backends)
            warnings.append(f"profile '{profile.name}' does not list backend '{name.value}' (it lists {listed}); using it anyway")
        backend_class(name)
        return name
    first_error = None
    for target in profile.backends:
        try:
            backend_class(target.name)
            return target.name
        except (MissingDependencyError, UsageError) as err:
            first_error = first_error or err
    assert first_error is not None
    raise MissingDependencyError(f"none of profile '{profile.name}''s backends is installed: {first_error.message}", first_error.hint)
