"""The reference runtime: a model run by the reference backend on the CPU, as written (FP32, no provider options).
Standard library only at import, like the rest of this package.

Every stage check, calibration pass, intermediate-tensor probe, quick timing and printed speed-up is measured
against it. The registry names the reference backend (``registry.REFERENCE``); its runner module here
(``runners/<name>.py``) opens the session (``reference_session``). The rest of edgeopt asks for :func:`session` or
:func:`with_outputs`, and names the reference by :data:`REFERENCE`, :data:`REFERENCE_FP32` (its FP32 row's key in
timing tables) and :data:`REFERENCE_RUNTIME` (how reports name where it ran). Those three are read from the
registry when first asked: the registry is host-side, not shipped to devices with this package, and nothing on a
device opens the reference.
"""

from __future__ import annotations

import importlib

_NAMES = ("REFERENCE", "REFERENCE_FP32", "REFERENCE_RUNTIME")


def _runner():
    from edgeopt.converters.registry import REFERENCE

    return importlib.import_module(f"{__package__}.runners.{REFERENCE.value}")


def __getattr__(name: str):
    if name not in _NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from edgeopt.converters.registry import REFERENCE

    return {"REFERENCE": REFERENCE.value, "REFERENCE_FP32": f"{REFERENCE.value}-fp32",
            "REFERENCE_RUNTIME": f"{REFERENCE.value} ({_runner().REFERENCE_PROVIDER})"}[name]


def session(model, *, threads: int | None = None, spinning: bool = True, optimize: bool = True,
            log_level: int = 3):
    """A reference session over ``model``: a path, serialized bytes or an ``onnx.ModelProto``.
    ``threads``: intra-op threads (None: the runtime's default). ``spinning=False``: the pool threads sleep after
    a call instead of spinning, as a timing alternating with another runtime needs. ``optimize=False``: no graph
    optimization, every tensor of the graph as written (intermediate shapes). The reference runtime is one of
    edgeopt's own requirements, so it is imported plainly, as the runner does."""
    return _runner().reference_session(model, threads=threads, spinning=spinning, optimize=optimize,
                                       log_level=log_level)


def is_run_error(err: BaseException) -> bool:
    """Whether ``err`` was raised by the reference runtime running a model (not by the Python code around it)."""
    return _runner().is_run_error(err)


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
