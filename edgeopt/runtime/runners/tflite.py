"""Runner for ``tflite`` artifacts (standard library + numpy + ai-edge-litert only).

The model runs in LiteRT's ``Interpreter`` (XNNPACK, LiteRT's default CPU delegate) with the
artifact's or the caller's thread count. Inputs and outputs go through the signature runner
(``serving_default``) when the model has one, so that ONNX names survive onnx2tf (its outputs are
``output_0…`` in ONNX order; the manifest's ``runtime.io`` maps them); a model without signatures
(e.g. a wrapped third-party ``.tflite``) runs through its input/output tensors by name.
Layout changes (``transpose`` in ``runtime.io``, e.g. NCHW->NHWC) are applied here, and int8/uint8
tensors are quantized/dequantized with the tensor's own scale and zero point, so callers feed the
same float arrays they would feed the ONNX model.
"""

from __future__ import annotations

import os

import numpy as np

from . import base

SIGNATURE = "serving_default"


def unresolved_op(message: str) -> str | None:
    """The op name in LiteRT's 'unresolved custom op' / 'Select TF op' error, or None."""
    import re

    m = re.search(r"unresolved custom op:\s*([A-Za-z0-9_.]+)", message) or \
        re.search(r"Select TensorFlow op\(s\), including\s*([A-Za-z0-9_.]+)", message) or \
        re.search(r"Node number \d+ \(([A-Za-z0-9_.]+)\) failed to prepare", message)
    return m.group(1).rstrip(".") if m else None


def open_interpreter(path: str, threads: int | None = None):
    """A LiteRT interpreter with tensors allocated (XNNPACK applies by default)."""
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as err:
        raise base.RuntimeMissing("ai-edge-litert is not installed (pip install ai-edge-litert)") from err
    interpreter = Interpreter(model_path=path, num_threads=int(threads) if threads else None)
    interpreter.allocate_tensors()
    return interpreter


def quantize(array: np.ndarray, detail: dict) -> np.ndarray:
    dtype = np.dtype(detail["dtype"])
    scale, zero = detail.get("quantization", (0.0, 0))
    if dtype.kind in "iu" and scale and np.asarray(array).dtype.kind == "f":
        info = np.iinfo(dtype)
        q = np.round(np.asarray(array, np.float32) / scale + zero)
        return np.clip(q, info.min, info.max).astype(dtype)
    return np.asarray(array).astype(dtype, copy=False)


def dequantize(array: np.ndarray, detail: dict) -> np.ndarray:
    scale, zero = detail.get("quantization", (0.0, 0))
    if np.asarray(array).dtype.kind in "iu" and scale:
        return ((np.asarray(array, np.float32) - zero) * scale).astype(np.float32)
    return np.asarray(array)


class Runner(base.Runner):
    def __init__(self, artifact_dir: str, manifest: dict, threads: int | None = None):
        super().__init__(artifact_dir, manifest, threads=threads)
        settings = self.runtime.get("settings", {})
        path = os.path.join(artifact_dir, self.runtime["model"])
        self.interpreter = open_interpreter(path, self.threads)
        key = settings.get("signature", SIGNATURE)
        signatures = self.interpreter.get_signature_list()
        self._sig = None
        if signatures:
            key = key if key in signatures else next(iter(signatures))
            self._sig = self.interpreter.get_signature_runner(key)
            self._in_details = dict(self._sig.get_input_details())
            self._out_details = dict(self._sig.get_output_details())
        else:
            self._in_details = {d["name"]: d for d in self.interpreter.get_input_details()}
            self._out_details = {d["name"]: d for d in self.interpreter.get_output_details()}
        self._io_in = {io["name"]: io for io in self._io("inputs")}
        self._io_out = self._io("outputs")

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        inputs = {}
        for name, arr in feeds.items():
            io = self._io_in.get(name, {"runtime_name": name, "transpose": None})
            rt = io["runtime_name"]
            if rt not in self._in_details:
                continue
            arr = self.to_runtime_layout(np.asarray(arr), io)
            inputs[rt] = np.ascontiguousarray(quantize(arr, self._in_details[rt]))
        if self._sig is not None:
            results = self._sig(**inputs)
        else:
            for rt, arr in inputs.items():
                self.interpreter.set_tensor(self._in_details[rt]["index"], arr)
            self.interpreter.invoke()
            results = {rt: self.interpreter.get_tensor(d["index"]) for rt, d in self._out_details.items()}
        out = {}
        for io in self._io_out:
            rt = io["runtime_name"]
            out[io["name"]] = self.from_runtime_layout(dequantize(results[rt], self._out_details[rt]), io)
        return out

    def close(self) -> None:
        self._sig = None
        self.interpreter = None
