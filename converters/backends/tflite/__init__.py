"""The TFLite (LiteRT) backend: its stage (``stage.py``), the onnx2tf conversion (``convert.py``), the
ai-edge-quantizer quantizer (``quantizer.py``) and accuracy-aware search (``search.py``), pre-flight check
(``preflight.py``), per-layer breakdown (``per_layer.py``), unit count (``unit_count.py``) and what the core asks
of it besides converting (``hooks.py``). An existing ``.tflite`` is read here (``wrapped.py``) and wrapped as an
artifact by orchestration (``edgeopt/wrapped_artifact.py``: it writes a manifest). The registry imports this
package for ``BACKEND``."""

from .stage import BACKEND

__all__ = ["BACKEND"]
