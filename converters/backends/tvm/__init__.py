"""The Apache TVM backend: its stage (``stage.py``), the build helpers (``build.py``: target, tuning key and cache,
device bundle), MetaSchedule tuning (``tune.py``), pre-flight check (``preflight.py``) and per-layer profiler
(``per_layer.py``). The registry imports this package for ``BACKEND``."""

from .stage import BACKEND

__all__ = ["BACKEND"]
