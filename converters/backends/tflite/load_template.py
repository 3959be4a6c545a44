# LiteRT: the interpreter made with the thread count the model was judged at (XNNPACK, LiteRT's default CPU
# delegate, applies by itself). Inputs and outputs keep the ONNX model's names and layout: the signature's
# names (onnx2tf's output_0...) and layout changes (NCHW -> NHWC) are mapped here, int8 tensors quantized with
# the tensor's own scale and zero point.
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
MODEL = "model.tflite"  # filled in from the manifest
SETTINGS: dict = {}  # the manifest's runtime.settings (filled in)
IO: dict = {}  # the manifest's runtime.io (filled in)


def quantize(array, detail: dict):
    dtype = np.dtype(detail["dtype"])
    scale, zero = detail.get("quantization", (0.0, 0))
    if dtype.kind in "iu" and scale and np.asarray(array).dtype.kind == "f":
        info = np.iinfo(dtype)
        q = np.round(np.asarray(array, np.float32) / scale + zero)
        return np.clip(q, info.min, info.max).astype(dtype)
    return np.asarray(array).astype(dtype, copy=False)


def dequantize(array, detail: dict):
    scale, zero = detail.get("quantization", (0.0, 0))
    if np.asarray(array).dtype.kind in "iu" and scale:
        return ((np.asarray(array, np.float32) - zero) * scale).astype(np.float32)
    return np.asarray(array)


def load(model_dir=None, *, bare=False):
    """A function running the model on numpy arrays keyed by the ONNX input names; ``bare``: no thread count."""
    from ai_edge_litert.interpreter import Interpreter

    threads = None if bare else SETTINGS.get("threads")
    interpreter = Interpreter(model_path=os.path.join(model_dir or HERE, MODEL),
                              num_threads=int(threads) if threads else None)
    interpreter.allocate_tensors()
    signatures = interpreter.get_signature_list()
    key = SETTINGS.get("signature") or "serving_default"
    runner = interpreter.get_signature_runner(key if key in signatures else next(iter(signatures))) \
        if signatures else None
    if runner is not None:
        ins, outs = dict(runner.get_input_details()), dict(runner.get_output_details())
    else:
        ins = {d["name"]: d for d in interpreter.get_input_details()}
        outs = {d["name"]: d for d in interpreter.get_output_details()}
    io_in = {io["name"]: io for io in IO.get("inputs", [])}
    io_out = IO.get("outputs") or [{"name": n, "runtime_name": n, "transpose": None} for n in outs]

    def run(feeds: dict) -> dict:
        given = {}
        for name, arr in feeds.items():
            io = io_in.get(name, {"runtime_name": name, "transpose": None})
            arr = np.transpose(arr, io["transpose"]) if io.get("transpose") else np.asarray(arr)
            given[io["runtime_name"]] = contiguous(quantize(arr, ins[io["runtime_name"]]))  # noqa: F821
        if runner is not None:
            results = runner(**given)
        else:
            for rt, arr in given.items():
                interpreter.set_tensor(ins[rt]["index"], arr)
            interpreter.invoke()
            results = {rt: interpreter.get_tensor(d["index"]) for rt, d in outs.items()}
        out = {}
        for io in io_out:
            arr = dequantize(results[io["runtime_name"]], outs[io["runtime_name"]])
            out[io["name"]] = np.transpose(arr, np.argsort(io["transpose"])) if io.get("transpose") else arr
        return out

    run.applied = {"num_threads": int(threads) if threads else None, "bare": bare}
    run.settings = {} if bare else SETTINGS  # the settings this load applied
    return run
