# OpenVINO: the IR compiled with the settings it was judged at. The IR does not carry them: a plain
# compile_model(xml, "CPU") runs at the CPU's default precision (bf16 on CPUs with AVX512-BF16 or AMX).
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = "model.xml"  # filled in from the manifest
SETTINGS: dict = {}  # the manifest's runtime.settings (filled in)
IO: dict = {}  # the manifest's runtime.io: ONNX names -> the IR's (filled in)


def config(settings: dict) -> dict:
    """The compile_model config edgeopt's runner applies for ``settings``."""
    out = {"INFERENCE_PRECISION_HINT": settings.get("inference_precision") or "f32",
           "PERFORMANCE_HINT": settings.get("performance_hint") or "LATENCY"}
    if settings.get("threads"):  # one stream on exactly those threads
        out.update(INFERENCE_NUM_THREADS=int(settings["threads"]), NUM_STREAMS=1)
        out.pop("PERFORMANCE_HINT")
    return out


def load(model_dir=None, *, bare=False):
    """A function running the model on numpy arrays keyed by the ONNX input names; ``bare``: no config at all."""
    import openvino as ov

    core = ov.Core()
    device = SETTINGS.get("device") or "CPU"
    if device not in core.available_devices and device != "AUTO":
        device = "CPU"  # e.g. an NPU artifact run on a machine without one
    path = os.path.join(model_dir or HERE, MODEL)
    compiled = core.compile_model(path, device) if bare else core.compile_model(path, device, config(SETTINGS))
    request = compiled.create_infer_request()
    names = {io["name"]: io["runtime_name"] for io in IO.get("inputs", [])}
    outs = [(io["name"], compiled.output(io["runtime_name"])) for io in IO.get("outputs", [])]

    def run(feeds: dict) -> dict:
        request.infer({names.get(k, k): contiguous(v) for k, v in feeds.items()})  # noqa: F821 - load_common's
        return {name: np.array(request.get_tensor(port).data) for name, port in outs}

    hint = compiled.get_property("INFERENCE_PRECISION_HINT")
    run.applied = {"device": device, "INFERENCE_PRECISION_HINT": str(getattr(hint, "get_type_name", lambda: hint)()),
                   "bare": bare}
    run.settings = {} if bare else SETTINGS  # the settings this load applied
    return run
