"""The reference runtime: a model run in ONNX Runtime on the CPU, as written (FP32, no provider options).
Standard library only at import, like the rest of this package.

Every stage check, calibration pass, intermediate-tensor probe, quick timing and printed speed-up is measured
against it. This module is the one place outside the ONNX Runtime backend's folder that names it: the rest of
edgeopt asks for :func:`session` or :func:`with_outputs`, and names the reference by :data:`REFERENCE`.
"""

from __future__ import annotations

import os

REFERENCE = "onnxruntime"  # the backend (a BackendName value) whose FP32 run is the reference
REFERENCE_FP32 = f"{REFERENCE}-fp32"  # its FP32 row's key in timing tables
REFERENCE_RUNTIME = f"{REFERENCE} (CPUExecutionProvider)"  # how reports name where the reference ran


def session(model, *, threads: int | None = None, spinning: bool = True, optimize: bool = True,
            log_level: int = 3):
    """An ONNX Runtime CPU session over ``model``: a path, serialized bytes or an ``onnx.ModelProto``.
    ``threads``: intra-op threads (None: the runtime's default). ``spinning=False``: the pool threads sleep after
    a call instead of spinning, as a timing alternating with another runtime needs. ``optimize=False``: no graph
    optimization, every tensor of the graph as written (intermediate shapes). ONNX Runtime is one of edgeopt's
    own requirements (numpy, onnx, onnxruntime), so it is imported plainly, as the runner does."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = log_level
    if threads:
        so.intra_op_num_threads = threads
    if not spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not optimize:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if hasattr(model, "SerializeToString"):
        src = model.SerializeToString()
    elif isinstance(model, bytes):
        src = model
    else:
        src = os.fspath(model)
    return ort.InferenceSession(src, so, providers=["CPUExecutionProvider"])


def with_outputs(model, names, *, typed: bool = True):
    """A copy of ``model`` (an ``onnx.ModelProto``) with the tensors ``names`` added as graph outputs, each once
    (``typed``: declared float; else with no type, for tensors of any type)."""
    import onnx

    probe = onnx.ModelProto.FromString(model.SerializeToString())
    present = {o.name for o in probe.graph.output}
    for name in names:
        if name not in present:
            present.add(name)
            probe.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)
                                      if typed else onnx.helper.make_empty_tensor_value_info(name))
    return probe
