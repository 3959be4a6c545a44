"""The shared ONNX Q/DQ stage's 8-bit quantizer (the ``qdq`` stage's, through ``onnxruntime.quantization``), whose
model the onnxruntime backend runs and the TVM backend compiles.

- static: ``quantize_static`` in QDQ format with the profile's preset (:mod:`.qdq_static`); the mode's
  granularity sets per-channel weights;
- dynamic: ``quantize_dynamic`` (INT8 weights, activations quantized per call), per-channel from the mode;
  ONNX Runtime's kernels cover MatMul/Gemm/LSTM/Attention (DynamicQuantizeLSTM), not GRU, which stays float;
- weights: not offered. ONNX Runtime has no INT8 weight-only path for these ops: its weight-only quantizer
  (``MatMulNBits``) covers MatMul only and was made for 4-bit LLM weights; LSTM/GRU/Conv would stay float.

Units are counted by :func:`edgeopt.quant_units.units_of`, as for every backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from edgeopt.enums import QuantMode
from edgeopt.quant_units import units_of

from .modes import DynamicMode, Granularity, QuantizedModel, Quantizer, StaticMode, WeightsMode


class QdqQuantizer(Quantizer):
    modes = (QuantMode.DYNAMIC, QuantMode.STATIC)  # a mode search builds dynamic first, then static

    def quantize(self, model: Path, mode: StaticMode | DynamicMode | WeightsMode, out: Path, *,
                 calib: Any = None, keep_float: tuple[str, ...] = (), settings: Any = None,
                 input_names: list[str] | None = None, calib_samples: int | None = None) -> QuantizedModel:
        """``settings``: the static mode's :class:`.qdq_static.StaticSettings` (default: this machine's preset);
        ``input_names``/``calib_samples``: what calibration feeds (default: the model's inputs, all samples)."""
        from edgeopt.errors import UsageError

        notes: dict[str, Any] = {}
        per_channel = mode.granularity == Granularity.PER_CHANNEL
        if mode.kind == QuantMode.STATIC:
            from .presets import preset_for_profile
            from .qdq_static import StaticSettings, quantize_static

            if calib is None or len(calib) == 0:
                raise UsageError("qdq: static INT8 needs calibration data", "give --calib FILE.npz")
            base = settings or StaticSettings.from_preset(preset_for_profile(None)[0])
            settings = base.model_copy(update={"per_channel": per_channel,
                                               "nodes_to_exclude": tuple(base.nodes_to_exclude) + tuple(keep_float)})
            quantize_static(Path(model), Path(out), settings, calib, input_names or _inputs(model), calib_samples,
                            notes=notes)
            notes["settings"] = settings.label()
        elif mode.kind == QuantMode.DYNAMIC:
            from .dynamic import quantize_dynamic

            quantize_dynamic(Path(model), Path(out), per_channel=per_channel, nodes_to_exclude=keep_float)
        else:
            raise UsageError("qdq: ONNX Runtime offers no weight-only INT8 for these ops",
                             "use --quant-mode dynamic (INT8 weights, activations per call) or static")
        q, f = units_of(Path(out))
        return QuantizedModel(Path(out), mode, q, f, tuple(keep_float), notes)


def _inputs(model: Path) -> list[str]:
    import onnx

    g = onnx.load(str(model), load_external_data=False).graph
    inits = {i.name for i in g.initializer}
    return [i.name for i in g.input if i.name not in inits]
