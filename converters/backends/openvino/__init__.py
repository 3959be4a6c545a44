"""The OpenVINO backend: its stage (``stage.py``), NNCF quantizer (``quantizer.py``), bounded auto over INT8 modes
(``modes.py``), accuracy-aware static search (``search.py``, ``float_cost.py``), pre-flight check (``preflight.py``),
per-layer profiler (``per_layer.py``), unit count (``unit_count.py``), as-loaded graph (``as_loaded.py``), placement
(``placement.py``) and what the core asks of it besides converting (``hooks.py``). The registry imports this package
for ``BACKEND``."""

from .stage import BACKEND

__all__ = ["BACKEND"]
