"""OpenVINO's timing of an ONNX prefix for the early-exit cuts: read, quantized by NNCF (static INT8, on the few
samples given) where the run writes INT8, compiled for the CPU at f32 on one thread, as the artifact's runner
compiles it."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def prefix_timer(int8: bool, calib: Any, work: Path):
    import importlib.util

    if importlib.util.find_spec("openvino") is None or (int8 and importlib.util.find_spec("nncf") is None):
        return None
    import openvino as ov

    from edgeopt.converters.quantize.modes import StaticMode
    from edgeopt.model import graph_inputs, graph_outputs, load_onnx

    from .quantizer import OpenVINOQuantizer
    from .runs import compiled_run

    core = ov.Core()

    def open_run(path: Path):
        proto = load_onnx(path, check=False)
        ins, outs = [s.name for s in graph_inputs(proto)], [s.name for s in graph_outputs(proto)]
        model = core.read_model(str(path))
        if int8:
            model = OpenVINOQuantizer.quantize_model(model, StaticMode(), calib=calib, input_names=ins,
                                                     common={"subset_size": len(calib)})
        return compiled_run(core, model, ins, outs, 1, precision="f32")

    return open_run, "openvino CPU (f32" + (", NNCF static INT8" if int8 else "") + "), 1 thread, this host"
