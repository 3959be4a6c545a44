"""The TFLite (LiteRT) backend: its stage (``stage.py``), the onnx2tf conversion (``convert.py``), the
ai-edge-quantizer quantizer (``quantizer.py``) and accuracy-aware search (``search.py``), pre-flight check
(``preflight.py``) and per-layer breakdown (``per_layer.py``). An existing ``.tflite`` wrapped as an artifact is
orchestration's work (``edgeopt/tflite_artifact.py``: it writes a manifest). The registry imports this package
for ``BACKEND``."""

from .stage import BACKEND

__all__ = ["BACKEND"]
