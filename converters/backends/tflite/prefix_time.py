"""LiteRT's timing of an ONNX prefix for the early-exit cuts: converted by onnx2tf, quantized by
ai-edge-quantizer (static INT8) where the run writes INT8, run by LiteRT with XNNPACK on one thread, as the
artifact's runner runs it. Calibration and the timed input are random arrays of the signature's shapes: scales
change no kernel's speed, and the random input spares mapping the ONNX layout onto the signature's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

CALIB = 8  # random samples each INT8 prefix is calibrated on (its speed, not its accuracy, is asked)


def prefix_timer(int8: bool, calib: Any, work: Path):
    import importlib.util

    if any(importlib.util.find_spec(m) is None for m in ("ai_edge_litert", "onnx2tf", "tensorflow")) or (
            int8 and importlib.util.find_spec("ai_edge_quantizer") is None):
        return None

    def open_run(path: Path):
        made = _converted(Path(path), int8, work / Path(path).stem)
        return _runner(made)

    what = "tflite (LiteRT, XNNPACK" + (", ai-edge-quantizer static INT8" if int8 else "") + "), 1 thread, this host"
    return open_run, what


def _converted(onnx_path: Path, int8: bool, folder: Path) -> Path:
    from edgeopt.converters.quantize.modes import StaticMode
    from edgeopt.data import Dataset

    from .convert import run_onnx2tf
    from .quantizer import TFLiteQuantizer

    float_out = folder / "float.tflite"
    run_onnx2tf(onnx_path, folder / "onnx2tf", folder / "onnx2tf.log", tflite_out=float_out)
    if not int8:
        return float_out
    rng = np.random.default_rng(0)
    arrays = {name: rng.random((CALIB, *d["shape"][1:])).astype(d["dtype"]) for name, d in _inputs(float_out).items()}
    data = Dataset(arrays, source="random (timing only)", synthetic=True, ranks={k: v.ndim for k, v in arrays.items()})
    return TFLiteQuantizer(None, samples=CALIB).quantize(float_out, StaticMode(), folder / "int8.tflite", calib=data).path


def _inputs(model: Path) -> dict:
    from edgeopt.runtime.runners.tflite import open_interpreter

    from .quantizer import SIGNATURE

    return dict(open_interpreter(str(model)).get_signature_runner(SIGNATURE).get_input_details())


def _runner(model: Path):
    """A run function over ``model`` (one thread, XNNPACK) that runs it on a fixed random input; the feeds it is
    given are not used."""
    from edgeopt.runtime.runners.tflite import open_interpreter

    from .quantizer import SIGNATURE

    sig = open_interpreter(str(model), threads=1).get_signature_runner(SIGNATURE)
    rng = np.random.default_rng(0)
    fixed = {}
    for name, d in sig.get_input_details().items():
        dtype = np.dtype(d["dtype"])
        arr = rng.random((1, *d["shape"][1:])) * (100 if dtype.kind in "iu" else 1)
        fixed[name] = arr.astype(dtype)

    def run(feed):
        return sig(**fixed)

    return run
