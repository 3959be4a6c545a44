"""ONNX Runtime's timing of an ONNX prefix for the early-exit cuts: the model as the chain hands it to this
backend (an INT8 run's QDQ model is quantized before the cut), one thread, pool threads not spinning."""

from __future__ import annotations

from pathlib import Path
from typing import Any

WHAT = "onnxruntime CPU, 1 thread, this host (the model as handed to the backend: QDQ where INT8)"


def prefix_timer(int8: bool, calib: Any, work: Path):
    from edgeopt.runtime.run_fn import run_fn

    return (lambda path: run_fn(path, 1, spinning=False)), WHAT
