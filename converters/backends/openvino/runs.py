"""OpenVINO runs as the artifact's runner runs them: a model saved as IR and read back, compiled for the CPU at an
inference precision hint with the runner's compile settings; what this CPU computes for a hint; OpenVINO's bf16 run.
"""

from __future__ import annotations

import functools

import numpy as np


def saved_and_read(model):
    """``model`` written as IR and read back: what the artifact will hold. An edited INT8 model can compute one
    thing in memory and another once saved, so every candidate is judged as it will be saved."""
    import tempfile

    import openvino as ov

    with tempfile.TemporaryDirectory(prefix="edgeopt-ov-") as tmp:
        ov.save_model(model, f"{tmp}/m.xml", compress_to_fp16=False)
        read = ov.Core().read_model(f"{tmp}/m.xml")
        return read.clone()  # not backed by the file about to go


def compiled_run(core, model, in_names: list[str], out_names: list[str], threads: int | None,
                 precision: str = "f32"):
    """A run function over ``model`` compiled for the CPU at ``precision`` (OpenVINO's inference precision hint;
    f32 unless asked, since its default is bf16 where the CPU has it), compiled from the model as saved and read
    back, with the runner's compile settings (``compile_config``), as the artifact's runner compiles it:
    ``ov.convert_model``'s in-memory model of a torch-exported LSTM compiles its LSTMs as TensorIterator loops, the
    same model read from IR as oneDNN's RNNSeq, so timing the in-memory model would misjudge what ships."""
    import openvino as ov

    from edgeopt.runtime.runners.openvino import compile_config

    compiled = core.compile_model(saved_and_read(model), "CPU", compile_config(precision, threads))
    request = compiled.create_infer_request()  # one request, inputs set as tensors: the runner's call, not a
    # compiled(dict) call, whose per-call overhead would swamp a small model's time
    ports = {p.get_any_name(): p for p in compiled.inputs}
    dtypes = {name: p.get_element_type().to_dtype() for name, p in ports.items()}

    bound: dict = {}  # input -> (the caller's array, the array the request reads): set again only when it changes

    def run(feed):
        for k, v in feed.items():
            if k in ports and k in in_names and (k not in bound or bound[k][0] is not v):
                data = np.asarray(v).astype(dtypes[k], copy=False)  # a 0-d input stays 0-d (silero's sr)
                data = data if data.flags.c_contiguous else np.ascontiguousarray(data)
                request.set_tensor(ports[k], ov.Tensor(data, shared_memory=True))
                bound[k] = (v, data)
        request.infer()
        return {name: np.array(request.get_output_tensor(i).data) for i, name in enumerate(out_names)}

    run.compiled = compiled
    return run


@functools.lru_cache(maxsize=8)
def cpu_runs_hint_as(precision: str) -> str:
    """What this machine's OpenVINO CPU plugin computes in when asked for the inference precision hint
    ``precision`` (``f32``, ``bf16`` or ``f16``): without native f16 it substitutes bf16 where the CPU has it
    (AVX512-BF16, AMX) and f32 elsewhere, so an NPU profile's f16 is judged at another precision on a
    machine without the NPU; read from a one-op model compiled with that hint."""
    import openvino as ov
    import openvino.opset13 as ops

    x = ops.parameter([1, 4], ov.Type.f32, name="x")
    tiny = ov.Model([ops.relu(x)], [x], "hint_probe")
    compiled = ov.Core().compile_model(tiny, "CPU", {"INFERENCE_PRECISION_HINT": precision})
    return compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()


def judged_at(precision: str) -> dict:
    """The report's record of the precision the candidates were judged at: the hint, and what this CPU ran it as
    when that differs (``cpu_ran_it_as``)."""
    ran = cpu_runs_hint_as(precision)
    return {"judged_at_hint": precision, **({"cpu_ran_it_as": ran} if ran != precision else {})}


BF16_SUGGEST = "--precision bf16 (an OpenVINO artifact run in bf16)"


def cpu_runs_bf16(core) -> bool:
    """Whether this machine's OpenVINO CPU plugin runs bf16 natively (AMX/AVX512-BF16)."""
    return "BF16" in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def bf16_run(core, ov_model, in_names, out_names, threads):
    """OpenVINO's bf16 run of the FP32 model where this CPU runs bf16 natively (AMX/AVX512-BF16), else None."""
    if not cpu_runs_bf16(core):
        return None
    return compiled_run(core, ov_model, in_names, out_names, threads, precision="bf16")


def onnx_timer(threads: int | None):
    """(ONNX path -> run function on this machine's OpenVINO CPU at f32, what runs it) for a stage's quick timing
    before the artifact exists (prune's speed estimate); None where OpenVINO is not installed."""
    import importlib.util

    if importlib.util.find_spec("openvino") is None:
        return None
    import openvino as ov

    from edgeopt.model import graph_inputs, graph_outputs, load_onnx

    core = ov.Core()

    def ov_run(p):
        m = load_onnx(p, check=False)
        names = [s.name for s in graph_inputs(m)], [s.name for s in graph_outputs(m)]
        return compiled_run(core, core.read_model(str(p)), *names, threads, precision="f32")

    return ov_run, "openvino CPU (f32) on this machine"
