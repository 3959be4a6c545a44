"""The ONNX Runtime backend: its stage (``stage.py``), TensorRT's Q/DQ placement check (``tensorrt_qdq.py``), its
pre-flight check (``preflight.py``) and per-layer profiler (``per_layer.py``). Its INT8 model is the ``qdq``
stage's ONNX Q/DQ (``edgeopt.converters.quantize.qdq_stage``), which the TVM backend compiles too. The registry imports
this package for ``BACKEND``."""

from .stage import BACKEND

__all__ = ["BACKEND"]
