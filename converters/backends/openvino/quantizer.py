"""OpenVINO's 8-bit quantizer (NNCF on the converted OpenVINO model).

- static: ``nncf.quantize`` (INT8 weights and activations, calibrated on the user's data); per-tensor weights
  through NNCF's advanced weight parameters;
- weights: ``nncf.compress_weights`` INT8 (weights only, activations stay float; NNCF's INT8 weight
  compression is per output channel, so per-tensor is refused);
- dynamic: not offered (OpenVINO has no dynamic-activation INT8 mode for CPU models).

Units are counted by :func:`edgeopt.quant_units.units_of`, as for every backend (on the in-memory model the
searches hold, by the rule it reads an IR with).
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

from edgeopt.converters.quantize.modes import (
    DynamicMode,
    Granularity,
    QuantizedModel,
    Quantizer,
    StaticMode,
    WeightsMode,
)
from edgeopt.deps import library_prints, require
from edgeopt.enums import QuantMode
from edgeopt.errors import UsageError
from edgeopt.quant_units import units_of

WEIGHT_OPS = ("Convolution", "GroupConvolution", "ConvolutionBackpropData", "GroupConvolutionBackpropData", "MatMul",
              "LSTMSequence", "GRUSequence", "RNNSequence", "LSTMCell", "GRUCell", "RNNCell", "Gather")


def read_model(path: Path):
    """An OpenVINO model from an IR (``.xml``) or an ONNX file."""
    ov = require("openvino", "OpenVINO INT8 quantization")
    return ov.Core().read_model(str(path)) if Path(path).suffix == ".xml" else ov.convert_model(str(path))


def nncf_dataset(nncf, calib, input_names: list[str], limit: int | None = None):
    n = len(calib) if limit is None else min(limit, len(calib))
    return nncf.Dataset(calib.feeds(n), lambda feed: {k: v for k, v in feed.items() if k in input_names})


@contextlib.contextmanager
def nncf_logs_follow_prints():
    """NNCF's logger writes INFO lines to the stdout it saw at import, through its own handler (at INFO, set by
    NNCF's import, after the CLI quieted it): point it where ``library_prints`` sends prints meanwhile, stderr
    with --verbose, else nowhere (its ignored_scope rebuild printed 76 lines of node names without it)."""
    import logging

    moved = []
    for h in logging.getLogger("nncf").handlers:
        if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
            moved.append((h, h.stream))  # setStream returns None, not the stream, when it is unchanged (nested)
            h.setStream(sys.stdout)
    try:
        yield
    finally:
        for h, stream in moved:
            h.setStream(stream)


class OpenVINOQuantizer(Quantizer):
    modes = (QuantMode.WEIGHTS, QuantMode.STATIC)  # a mode search builds weight-only first, then static
    granularities = {QuantMode.WEIGHTS: (Granularity.PER_CHANNEL,),  # NNCF's INT8 weight compression
                     QuantMode.STATIC: (Granularity.PER_CHANNEL,)}

    def quantize(self, model: Path, mode: StaticMode | DynamicMode | WeightsMode, out: Path, *,
                 calib: Any = None, keep_float: tuple[str, ...] = (), common: dict | None = None) -> QuantizedModel:
        """``model``: ONNX or OpenVINO IR; writes IR to ``out`` (``.xml``, exact weights). ``common``: more
        ``nncf.quantize`` arguments (preset, subset size, ...) for the static mode."""
        ov = require("openvino", "OpenVINO INT8 quantization")
        ov_model = read_model(Path(model))
        names = [p.get_any_name() for p in ov_model.inputs]
        q = self.quantize_model(ov_model, mode, calib=calib, input_names=names, keep_float=keep_float, common=common)
        ov.save_model(q, str(out), compress_to_fp16=False)
        n_q, n_f = units_of(q)
        return QuantizedModel(Path(out), mode, n_q, n_f, tuple(keep_float))

    @staticmethod
    def quantize_model(ov_model, mode, *, calib=None, input_names: list[str] | None = None,
                       keep_float: tuple[str, ...] = (), common: dict | None = None):
        """The quantized ``ov.Model`` (the OpenVINO backend calls this on its converted model, which stays as it was)."""
        nncf = require("nncf", "OpenVINO INT8 quantization")
        names = input_names or [p.get_any_name() for p in ov_model.inputs]
        scope = nncf.IgnoredScope(names=list(keep_float), validate=False) if keep_float else None
        with library_prints(), nncf_logs_follow_prints():  # stdout is the CLI's output
            if mode.kind == QuantMode.STATIC:
                if calib is None or len(calib) == 0:
                    raise UsageError("openvino: static INT8 needs calibration data", "give --calib FILE.npz")
                kw = dict(common or {})
                kw.setdefault("subset_size", min(len(calib), 300))
                if scope is not None:
                    kw["ignored_scope"] = scope
                if mode.granularity == Granularity.PER_TENSOR:
                    from nncf.quantization.advanced_parameters import (
                        AdvancedQuantizationParameters,
                        QuantizationParameters,
                    )

                    kw["advanced_parameters"] = AdvancedQuantizationParameters(
                        weights_quantization_params=QuantizationParameters(per_channel=False))
                return nncf.quantize(ov_model.clone(), nncf_dataset(nncf, calib, names, kw["subset_size"]), **kw)
            if mode.kind == QuantMode.WEIGHTS:
                if mode.granularity == Granularity.PER_TENSOR:
                    raise UsageError("openvino: NNCF's INT8 weight compression is per output channel only",
                                     "use weights per-channel, or static INT8")
                # on a copy: NNCF compresses an OpenVINO model's weights in place
                return nncf.compress_weights(ov_model.clone(), mode=nncf.CompressWeightsMode.INT8_ASYM, ignored_scope=scope)
        raise UsageError("openvino: dynamic INT8 is not offered by OpenVINO",
                         "use --quant-mode weights (INT8 weights, float activations) or static")
