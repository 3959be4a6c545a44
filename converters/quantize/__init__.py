"""ONNX-side INT8 and the ``qdq`` chain stage.

The backend-free INT8 core (modes, the accuracy bound's mode choice, the budgeted search, the speed verdict, sensitivity,
heads) that every backend's quantizer uses, and the ``qdq`` stage (:mod:`.qdq_stage`: ONNX -> ONNX Q/DQ, static
INT8, dynamic INT8, FP16) that the ONNX Runtime and TVM backends share.
"""

from __future__ import annotations

from .qdq_stage import QdqConfig, QdqStage

__all__ = ["QdqConfig", "QdqStage"]
