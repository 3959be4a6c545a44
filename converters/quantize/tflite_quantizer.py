"""TFLite's 8-bit quantizer: a float ``.tflite`` (onnx2tf's) quantized by per-op recipe with ``ai-edge-quantizer``.

Static INT8 (weights and activations, activation ranges calibrated on the user's ``--calib`` through the
float model's ``serving_default`` signature), dynamic-range (INT8 weights, activations quantized at run
time) and weight-only INT8. Ops named in ``keep_float`` get a ``no_quantize`` entry of their own (an
anchored regex on the op's *scope*: its output tensor names joined by ``;``, as ai-edge-quantizer names
ops), so they stay float while their neighbours are quantized; that is the per-op fallback the
accuracy-aware search (:mod:`.tflite_search`) grows and bisects. Integer model inputs (token ids, bytes)
keep their dtype: they are fed to calibration as they are, and the quantizer leaves integer tensors alone.

:func:`op_counts` reads a ``.tflite``'s flatbuffer and counts the ops that compute in 8 bits against those
that stay float, so an artifact called int8 shows how much of it is.
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edgeopt.errors import StageError

from .modes import DynamicMode, Granularity, QuantizedModel, Quantizer, QuantMode, StaticMode, WeightsMode

SIGNATURE = "serving_default"
_INT_TYPES = {3, 7, 9}  # flatbuffer TensorType UINT8, INT16, INT8
_FLOAT_TYPES = {0, 1}  # FLOAT32, FLOAT16
_QDQ = {6, 114}  # BuiltinOperator DEQUANTIZE, QUANTIZE


def _scope(sg, op) -> str:
    """ai-edge-quantizer's name of an op: its output tensor names joined by ';', with a trailing ';'."""
    names = [_name(sg.tensors[i]) for i in op.outputs if i >= 0]
    names = [n for n in names if n]
    return ";".join(names) + ";" if names else ""


def _name(tensor) -> str:
    n = tensor.name
    return n.decode() if isinstance(n, bytes) else str(n or "")


def read_ops(path: Path) -> tuple[Any, list[dict]]:
    """(model, ops of the main subgraph): each op's index, type name, scope, inputs, outputs, whether it is
    a quantize/dequantize op."""
    from ai_edge_quantizer.utils import tfl_flatbuffer_utils as fu

    model = fu.read_model(Path(path).read_bytes())
    sg = model.subgraphs[0]
    ops = []
    for i, op in enumerate(sg.operators):
        code = model.operatorCodes[op.opcodeIndex]
        builtin = max(int(code.builtinCode), int(getattr(code, "deprecatedBuiltinCode", 0) or 0))
        kind = fu.TFL_OP_CODE_TO_NAME.get(builtin)
        ops.append({"index": i, "type": str(getattr(kind, "value", kind) or f"op{builtin}"), "scope": _scope(sg, op),
                    "inputs": [int(t) for t in op.inputs if t >= 0], "outputs": [int(t) for t in op.outputs if t >= 0],
                    "qdq": builtin in _QDQ})
    return model, ops


def op_counts(path: Path) -> dict:
    """Ops of the main subgraph that compute on 8-bit data (or read INT8 weights) vs those that stay float;
    quantize/dequantize ops are counted apart."""
    model, ops = read_ops(path)
    tensors = model.subgraphs[0].tensors
    dequantized = {t for op in ops if op["qdq"] for t in op["outputs"]
                   if any(int(tensors[i].type) in _INT_TYPES for i in op["inputs"])}
    quantized = floating = 0
    for op in ops:
        if op["qdq"]:
            continue
        types = {int(tensors[t].type) for t in op["inputs"] + op["outputs"]}
        if types & _INT_TYPES or dequantized & set(op["inputs"]):
            quantized += 1
        elif types & _FLOAT_TYPES:
            floating += 1
    return {"quantized_ops": quantized, "float_ops": floating,
            "quantize_dequantize_ops": sum(1 for op in ops if op["qdq"])}


class TFLiteQuantizer(Quantizer):
    """``quantize(float_tflite, mode, out, calib=Dataset, keep_float=(op scopes…))`` with ai-edge-quantizer.

    ``io_inputs`` is the artifact's ``runtime.io.inputs`` (ONNX name → signature name and layout transpose),
    so calibration data in the ONNX model's layout reaches the ``.tflite`` as it expects it; ``float_io``
    keeps a static model's inputs and outputs float (quantize/dequantize inside), else they are int8."""

    modes: ClassVar[tuple[QuantMode, ...]] = (QuantMode.STATIC, QuantMode.DYNAMIC, QuantMode.WEIGHTS)

    def __init__(self, io_inputs: list[dict], *, samples: int = 200, float_io: bool = True):
        self.io_inputs, self.samples, self.float_io = list(io_inputs), int(samples), bool(float_io)

    def recipe(self, mode: StaticMode | DynamicMode | WeightsMode, keep_float: tuple[str, ...] = ()) -> list[dict]:
        from ai_edge_quantizer import qtyping, recipe_manager

        rm = recipe_manager.RecipeManager()
        gran = (qtyping.QuantGranularity.CHANNELWISE if mode.granularity == Granularity.PER_CHANNEL
                else qtyping.QuantGranularity.TENSORWISE)
        every = qtyping.TFLOperationName.ALL_SUPPORTED
        if mode.kind == QuantMode.STATIC:
            rm.add_static_config(".*", every, activation_num_bits=8, weight_num_bits=mode.bits, weight_granularity=gran)
            if self.float_io:
                for io in (qtyping.TFLOperationName.INPUT, qtyping.TFLOperationName.OUTPUT):
                    rm.add_quantization_config(".*", io, None, "no_quantize")
        elif mode.kind == QuantMode.DYNAMIC:
            rm.add_dynamic_config(".*", every, num_bits=mode.bits, granularity=gran)
        else:
            rm.add_weight_only_config(".*", every, num_bits=mode.bits, granularity=gran)
        for scope in keep_float:  # later entries win: each named op falls back to float
            rm.add_quantization_config(f"^{re.escape(scope)}$", every, None, "no_quantize")
        return rm.get_quantization_recipe()

    def quantize(self, model: Path, mode: StaticMode | DynamicMode | WeightsMode, out: Path, *,
                 calib: Any = None, keep_float: tuple[str, ...] = ()) -> QuantizedModel:
        from edgeopt.deps import require

        quantizer = require("ai_edge_quantizer.quantizer", "INT8 for the TFLite backend")
        q = quantizer.Quantizer(str(model), self.recipe(mode, tuple(keep_float)))
        calibration = None
        if q.need_calibration:
            if calib is None or len(calib) == 0:
                raise StageError("tflite: static INT8 needs calibration data", "give --calib FILE.npz")
            try:
                feeds = self.signature_feeds(model, calib)
                with _silenced():
                    calibration = q.calibrate({SIGNATURE: feeds}, num_threads=1)
            except (ValueError, RuntimeError) as err:
                raise StageError(f"tflite: ai-edge-quantizer could not calibrate the model: {_first(err)}",
                                 "try --precision fp16, or another --backend") from err
        try:
            with _silenced():
                result = q.quantize(calibration, enable_progress_report=False)
        except (ValueError, RuntimeError, KeyError) as err:
            raise StageError(f"tflite: ai-edge-quantizer failed ({mode.label()}): {_first(err)}",
                             "try --precision fp16, or another --backend") from err
        from edgeopt.files import atomic_path

        with atomic_path(out) as tmp:
            tmp.write_bytes(bytes(result.quantized_model))
        counts = op_counts(out)
        return QuantizedModel(Path(out), mode, counts["quantized_ops"], counts["float_ops"], tuple(keep_float),
                              notes=counts)

    def signature_feeds(self, model: Path, data) -> list[dict[str, np.ndarray]]:
        """Samples of ``data`` (ONNX names and layout) as the signature's inputs (names, layout, dtype)."""
        from edgeopt.runtime.runners.tflite import open_interpreter

        sig = open_interpreter(str(model)).get_signature_runner(SIGNATURE)
        details = dict(sig.get_input_details())
        feeds = []
        for feed in data.feeds(min(len(data), self.samples)):
            one = {}
            for entry in self.io_inputs:
                arr = np.asarray(feed[entry["name"]])
                if entry.get("transpose"):
                    arr = np.transpose(arr, entry["transpose"])
                one[entry["runtime_name"]] = np.ascontiguousarray(arr.astype(details[entry["runtime_name"]]["dtype"]))
            feeds.append(one)
        return feeds


@contextlib.contextmanager
def _silenced():
    """ai-edge-quantizer's progress bars (tqdm, on stderr) and LiteRT's debugging warning stay out of the
    CLI's output; its failures still arrive as exceptions."""
    from edgeopt.deps import library_prints

    with warnings.catch_warnings(), library_prints(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def _first(err: BaseException) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:200]
