"""The OpenVINO backend: its stage (``stage.py``), NNCF quantizer (``quantizer.py``), bounded auto over INT8 modes
(``modes.py``), accuracy-aware static search (``search.py``, ``float_cost.py``), pre-flight check (``preflight.py``)
and per-layer profiler (``per_layer.py``). The registry imports this package for ``BACKEND``."""

from .stage import BACKEND

__all__ = ["BACKEND"]
