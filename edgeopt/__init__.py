"""edgeopt: make a model fast on a named edge device, and prove it on that device.

The public API lives in :mod:`edgeopt.api` and is re-exported here lazily, so
``import edgeopt`` stays light.
"""

from __future__ import annotations

import sys as _sys
import types as _types

__version__ = "0.1.0"

_API = (
    "analyze", "doctor", "load_profile", "list_profiles", "validate_profile",
    "convert", "load_artifact", "make_plan", "bench_artifacts", "bench_model",
    "store_run", "list_runs", "compare_runs", "build_report", "remote_bench", "remote_bench_many",
    "tune", "run_pipeline", "optimize", "ChainRequest", "ConvertOptions", "BenchOptions",
)


def __getattr__(name: str):
    if name in _API:
        from edgeopt import api

        return getattr(api, name)
    raise AttributeError(f"module 'edgeopt' has no attribute {name!r}")


class _Package(_types.ModuleType):
    """``edgeopt.convert``, ``edgeopt.analyze``, ``edgeopt.optimize`` and ``edgeopt.tune`` are API functions and
    also the names of modules: importing a module sets the package's attribute to it, which would turn ``edgeopt.convert(...)``
    into "module is not callable" after the first call. The functions keep those names here; the modules stay
    reachable by import (``from edgeopt.convert import ...``)."""

    def __getattribute__(self, name: str):
        if name in _SHADOWED:
            from edgeopt import api

            return getattr(api, name)
        return super().__getattribute__(name)


_SHADOWED = frozenset({"analyze", "convert", "optimize", "tune"})
_sys.modules[__name__].__class__ = _Package


__all__ = ["__version__", *_API]
