"""The mode searches read their candidates from each quantizer's ``modes`` declaration: a kind declared on a
quantizer is one the search builds and judges, with no list of its own to edit.

Model: a small LSTM + Linear built with ``onnx.helper`` (random weights; its metric is agreement with FP32)."""

from __future__ import annotations

import pytest
from test_quant_modes import _ctx, lstm_data, tiny_lstm

from edgeopt.converters.accuracy_bound import AccuracyBound
from edgeopt.converters.base import Intermediate
from edgeopt.converters.quantize.modes import DynamicMode, Granularity, StaticMode, WeightsMode
from edgeopt.enums import QuantMode


def labels(modes) -> list[str]:
    return [m.label() for m in modes]


@pytest.mark.onnxruntime
def test_each_backends_search_modes_come_from_its_quantizers_declaration():
    from edgeopt.converters.backends.openvino.quantizer import OpenVINOQuantizer
    from edgeopt.converters.backends.tflite.quantizer import TFLiteQuantizer
    from edgeopt.converters.quantize.qdq_modes import qdq_search_modes
    from edgeopt.converters.quantize.qdq_quantizer import QdqQuantizer
    from edgeopt.converters.quantize.qdq_static import StaticSettings

    assert labels(QdqQuantizer.search_modes(QuantMode.AUTO)) == ["dynamic per-channel", "dynamic per-tensor",
                                                           "static per-channel", "static per-tensor"]
    # the profile's static settings fix static's granularity; a requested kind is that kind at --per-channel's
    settings = StaticSettings(per_channel=True)
    assert labels(qdq_search_modes(QuantMode.AUTO, None, settings)) == ["dynamic per-channel", "dynamic per-tensor",
                                                                        "static per-channel"]
    assert labels(qdq_search_modes(QuantMode.DYNAMIC, False)) == ["dynamic per-tensor"]
    assert labels(OpenVINOQuantizer.search_modes(QuantMode.AUTO)) == ["weights per-channel", "static per-channel"]
    assert labels(OpenVINOQuantizer.search_modes(QuantMode.WEIGHTS)) == ["weights per-channel"]
    assert OpenVINOQuantizer.search_modes(QuantMode.DYNAMIC) == []
    assert labels(TFLiteQuantizer.mode_configs(QuantMode.AUTO, Granularity.PER_TENSOR)) == [
        "static per-tensor", "dynamic per-channel", "weights per-channel", "static per-channel"]
    assert StaticMode.what == "static" and DynamicMode.what == "dynamic" and WeightsMode.what == "weight-only"


@pytest.mark.onnxruntime
def test_a_kind_declared_on_a_quantizer_is_searched_by_the_ort_mode_search(tmp_path, monkeypatch):
    from edgeopt.converters.quantize import QdqConfig, QdqStage, qdq_modes
    from edgeopt.converters.quantize.qdq_quantizer import QdqQuantizer

    built = []

    class WithWeights(QdqQuantizer):
        """A weight-only mode registered on ONNX Runtime's quantizer (built as dynamic INT8 here, as a stand-in)."""

        modes = (QuantMode.DYNAMIC, QuantMode.WEIGHTS, QuantMode.STATIC)
        granularities = {QuantMode.WEIGHTS: (Granularity.PER_CHANNEL,)}

        def quantize(self, model, mode, out, **kw):
            built.append(mode.label())
            if mode.kind == QuantMode.WEIGHTS:
                q = super().quantize(model, DynamicMode(granularity=mode.granularity), out, **kw)
                q.mode = mode
                return q
            return super().quantize(model, mode, out, **kw)

    monkeypatch.setattr(qdq_modes, "QUANTIZER", WithWeights)
    model = tiny_lstm(tmp_path / "lstm.onnx")
    ctx = _ctx(tmp_path, lstm_data(32, 1), lstm_data(64, 2))
    QdqStage().run(Intermediate(model), QdqConfig(bound=AccuracyBound(max_accuracy_drop=50.0),
                                                            backend="onnxruntime"), ctx)
    rows = ctx.record.report["mode_search"]["candidates"]
    assert [r["mode"] for r in rows] == ["dynamic per-channel", "dynamic per-tensor", "weights per-channel",
                                         "static per-channel"]
    assert "weights per-channel" in built
    weights = next(r for r in rows if r["mode"] == "weights per-channel")
    assert weights["quantized_units"] > 0 and "search_value" in weights


@pytest.mark.parametrize("quantizer", ["onnxruntime", "openvino"])
def test_a_requested_kind_the_quantizer_lacks_gives_no_candidate(quantizer):
    from edgeopt.converters.backends.openvino.quantizer import OpenVINOQuantizer
    from edgeopt.converters.quantize.qdq_quantizer import QdqQuantizer

    cls = {"onnxruntime": QdqQuantizer, "openvino": OpenVINOQuantizer}[quantizer]
    lacking = next(k for k in (QuantMode.STATIC, QuantMode.DYNAMIC, QuantMode.WEIGHTS) if not cls.supports(k))
    assert cls.search_modes(lacking) == []
