"""TFLite's 8-bit quantizer: a float ``.tflite`` (onnx2tf's) quantized by per-op recipe with ``ai-edge-quantizer``.

Static INT8 (weights and activations, activation ranges calibrated on the user's ``--calib`` through the
float model's ``serving_default`` signature), dynamic-range (INT8 weights, activations quantized at run
time) and weight-only INT8. Ops named in ``keep_float`` get a ``no_quantize`` entry of their own (an
anchored regex on the op's *scope*: its output tensor names joined by ``;``, as ai-edge-quantizer names
ops), so they stay float while their neighbours are quantized; that is the per-op fallback the
accuracy-aware search (:mod:`.search`) grows and bisects. Integer model inputs (token ids, bytes)
keep their dtype: they are fed to calibration as they are, and the quantizer leaves integer tensors alone.

:func:`.ops.op_counts` counts every op that computes in 8 bits against those that stay float (the report's
breakdown); the quantized units are :func:`edgeopt.quant_units.units_of`'s count.
"""

from __future__ import annotations

import contextlib
import io
import re
import warnings
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from edgeopt.converters.quantize.modes import (
    DynamicMode,
    Granularity,
    QuantizedModel,
    Quantizer,
    QuantMode,
    StaticMode,
    WeightsMode,
)
from edgeopt.errors import StageError
from edgeopt.quant_units import units_of

from .ops import op_counts, read_ops
from .unshare import unshare_for

SIGNATURE = "serving_default"
SMOKE_SAMPLES = 16  # calibration samples a quantized model must run on (no delegate) before it is used
MAX_REPAIRS = 8  # ops kept float because their INT8 kernel failed on those samples
_FAILED = re.compile(r"Node number (\d+) \((\w+)\) failed to (?:invoke|prepare)")


class TFLiteQuantizer(Quantizer):
    """``quantize(float_tflite, mode, out, calib=Dataset, keep_float=(op scopes…))`` with ai-edge-quantizer: the
    :class:`.modes.Quantizer` the TFLite backend names, with the three modes ai-edge-quantizer's recipes offer.

    ``io_inputs`` is the artifact's ``runtime.io.inputs`` (ONNX name → signature name and layout transpose),
    so calibration data in the ONNX model's layout reaches the ``.tflite`` as it expects it (None: the data's
    arrays are named after the signature's inputs and in their layout, as for any float ``.tflite``);
    ``float_io`` keeps a static model's inputs and outputs float (quantize/dequantize inside), else they are int8."""

    modes: ClassVar[tuple[QuantMode, ...]] = (QuantMode.STATIC, QuantMode.DYNAMIC, QuantMode.WEIGHTS)
    granularities: ClassVar[dict[QuantMode, tuple[Granularity, ...]]] = {
        QuantMode.DYNAMIC: (Granularity.PER_CHANNEL,), QuantMode.WEIGHTS: (Granularity.PER_CHANNEL,)}

    def __init__(self, io_inputs: list[dict] | None = None, *, samples: int = 200, float_io: bool = True):
        self.io_inputs = None if io_inputs is None else list(io_inputs)
        self.samples, self.float_io = int(samples), bool(float_io)
        self._calibrated: dict[str, dict] = {}

    @classmethod
    def mode_configs(cls, requested: QuantMode, granularity: Granularity) -> list[StaticMode | DynamicMode | WeightsMode]:
        """The modes a build tries (:meth:`search_modes`, the ``requested`` ``--quant-mode`` kind only unless
        ``auto``), in order: with ``auto``, static with ``granularity`` (weights), dynamic-range, weight-only, then
        static with the other granularity."""
        modes = cls.search_modes(requested)
        first = [m for m in modes if m.kind != QuantMode.STATIC or m.granularity == granularity]
        return first + [m for m in modes if m not in first]

    def recipe(self, mode: StaticMode | DynamicMode | WeightsMode, keep_float: tuple[str, ...] = ()) -> list[dict]:
        from ai_edge_quantizer import qtyping, recipe_manager

        rm = recipe_manager.RecipeManager()
        gran = (qtyping.QuantGranularity.CHANNELWISE if mode.granularity == Granularity.PER_CHANNEL
                else qtyping.QuantGranularity.TENSORWISE)
        every = qtyping.TFLOperationName.ALL_SUPPORTED
        if mode.kind == QuantMode.STATIC:
            rm.add_static_config(".*", every, activation_num_bits=8, weight_num_bits=mode.bits, weight_granularity=gran)
            # LiteRT's INT8 DIV fails at run time when a divisor quantizes to its zero point: divisions stay float
            rm.add_quantization_config(".*", qtyping.TFLOperationName.DIV, None, "no_quantize")
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
        """Quantize, then run the result on a few calibration samples without a delegate: an op whose INT8
        kernel fails there (a DIV whose divisor quantizes to zero, say) is kept float and the model
        quantized again (``notes['forced_float']`` names each, with LiteRT's reason)."""
        keep, forced = list(keep_float), []
        feeds = self.signature_feeds(model, calib)[:SMOKE_SAMPLES] if calib is not None and len(calib) else []
        for _ in range(MAX_REPAIRS + 1):
            self._once(model, mode, out, calib, tuple(keep))
            bad = _failing_op(out, feeds)
            if bad is None:
                counts = op_counts(out)  # every op, the report's breakdown; units: the one count
                return QuantizedModel(Path(out), mode, *units_of(out), tuple(keep_float),
                                      notes={**counts, "forced_float": forced})
            if bad["scope"] in keep:
                break
            forced.append(bad)
            keep.append(bad["scope"])
        raise StageError(f"tflite: the {mode.label()} INT8 model does not run: op {bad['op']} failed ({bad['why']})",
                         "try --precision fp16, or another --backend")

    def _once(self, model: Path, mode, out: Path, calib, keep_float: tuple[str, ...]) -> None:
        from edgeopt.deps import require
        from edgeopt.files import atomic_path

        quantizer = require("ai_edge_quantizer.quantizer", "INT8 for the TFLite backend")
        source = out.with_name(out.stem + ".unshared.tflite")  # float ops' constants copied for the quantized ones
        source = source if unshare_for(model, source, keep_float) else model
        q = quantizer.Quantizer(str(source), self.recipe(mode, keep_float))
        calibration = None
        if q.need_calibration:  # the activations' ranges: the copies are constants, the model's own ranges hold
            calibration = self.calibrate(model, calib)
        try:
            with _silenced():
                result = q.quantize(calibration, enable_progress_report=False)
        except Exception as err:  # noqa: BLE001 - the library's own faults on one recipe (its dequant_insert adds
            # bytes to a str name on some float-kept ops in 0.10.0): this candidate is not built, the search goes on
            raise StageError(f"tflite: ai-edge-quantizer failed ({mode.label()}): {type(err).__name__}: {_first(err)}",
                             "try --precision fp16, or another --backend") from err
        with atomic_path(out) as tmp:
            tmp.write_bytes(bytes(result.quantized_model))

    def calibrate(self, model: Path, calib) -> dict:
        """Activation ranges of every tensor, from the full static recipe: computed once per float model and
        reused by every candidate (keeping ops float, or the other weight granularity, changes no range)."""
        from edgeopt.deps import require

        key = str(Path(model).resolve())
        if key in self._calibrated:
            return self._calibrated[key]
        if calib is None or len(calib) == 0:
            raise StageError("tflite: static INT8 needs calibration data", "give --calib FILE.npz")
        quantizer = require("ai_edge_quantizer.quantizer", "INT8 for the TFLite backend")
        q = quantizer.Quantizer(str(model), self.recipe(StaticMode()))
        try:
            feeds = self.signature_feeds(model, calib)
            with _silenced():
                self._calibrated[key] = q.calibrate({SIGNATURE: feeds}, num_threads=1)
        except (ValueError, RuntimeError, KeyError) as err:
            raise StageError(f"tflite: ai-edge-quantizer could not calibrate the model: {_first(err)}",
                             "try --precision fp16, or another --backend") from err
        return self._calibrated[key]

    def signature_feeds(self, model: Path, data) -> list[dict[str, np.ndarray]]:
        """Samples of ``data`` (ONNX names and layout) as the signature's inputs (names, layout, dtype)."""
        from edgeopt.runtime.runners.tflite import open_interpreter

        sig = open_interpreter(str(model)).get_signature_runner(SIGNATURE)
        details = dict(sig.get_input_details())
        entries = self.io_inputs if self.io_inputs is not None else [
            {"name": name, "runtime_name": name, "transpose": None} for name in details]
        feeds = []
        for feed in data.feeds(min(len(data), self.samples)):
            one = {}
            for entry in entries:
                arr = np.asarray(feed[entry["name"]])
                if entry.get("transpose"):
                    arr = np.transpose(arr, entry["transpose"])
                one[entry["runtime_name"]] = np.ascontiguousarray(arr.astype(details[entry["runtime_name"]]["dtype"]))
            feeds.append(one)
        return feeds


def _failing_op(path: Path, feeds: list[dict]) -> dict | None:
    """The op (scope, type, LiteRT's reason) whose kernel fails on one of ``feeds``, or None when all run."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from edgeopt.runtime.runners.tflite import quantize

    if not feeds:
        return None
    it = Interpreter(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES)
    sig = it.get_signature_runner(SIGNATURE)
    ins = dict(sig.get_input_details())
    for feed in feeds:
        try:
            sig(**{k: quantize(v, ins[k]) for k, v in feed.items()})
        except RuntimeError as err:
            m = _FAILED.search(str(err))
            _, ops = read_ops(path)
            if not m or int(m.group(1)) >= len(ops):
                raise StageError(f"tflite: the INT8 model does not run: {_first(err)}",
                                 "try --precision fp16, or another --backend") from err
            op = ops[int(m.group(1))]
            return {"scope": op["scope"], "op": op["type"], "why": _first(err).split("Node number")[0].strip()}
    return None


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
