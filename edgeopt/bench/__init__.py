"""``edgeopt bench``: measure artifacts side by side (interleaved), store runs, compare backends.

The API is :func:`edgeopt.bench.api.bench_artifacts` and :func:`edgeopt.bench.model.bench_model`;
the timing itself is the device-side core, :mod:`edgeopt.runtime.measure`.
"""

from __future__ import annotations

__all__ = ["bench_artifacts", "bench_model", "BenchOptions"]


def __getattr__(name: str):
    if name in __all__:
        from edgeopt.bench import api, model

        return getattr(model if name == "bench_model" else api, name)
    raise AttributeError(name)
