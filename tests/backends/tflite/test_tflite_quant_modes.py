"""TFLite's quantizer as the one ``Quantizer`` interface (converters/quantize/modes.py): static, dynamic-range and
weight-only INT8 from ai-edge-quantizer, each on a tiny float ``.tflite``, told apart by what the model file holds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tflite

_INT8, _FLOAT32 = 9, 0  # flatbuffer TensorType


def _mlp(path: Path) -> Path:
    """x [1,16] -> Gemm 16x32 -> Relu -> Gemm 32x4: two ops with weights."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.standard_normal(s).astype(np.float32) * 0.3, n)
             for n, s in (("w1", (16, 32)), ("b1", (32,)), ("w2", (32, 4)), ("b2", (4,)))]
    nodes = [h.make_node("Gemm", ["x", "w1", "b1"], ["a"]), h.make_node("Relu", ["a"], ["r"]),
             h.make_node("Gemm", ["r", "w2", "b2"], ["y"])]
    graph = h.make_graph(nodes, "mlp", [h.make_tensor_value_info("x", T.FLOAT, [1, 16])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 4])], initializer=inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


@pytest.fixture(scope="module")
def float_tflite(tmp_path_factory) -> Path:
    from edgeopt.converters.backends.tflite.convert import run_onnx2tf

    d = tmp_path_factory.mktemp("mlp")
    out = d / "float.tflite"
    run_onnx2tf(_mlp(d / "mlp.onnx"), d / "o2t", d / "onnx2tf.log", tflite_out=out)
    return out


def _fully_connected(path: Path) -> list[dict]:
    """Each FULLY_CONNECTED op: the type of its data input and of its weights, and whether the weights come
    through a DEQUANTIZE op (weight-only INT8)."""
    from edgeopt.converters.backends.tflite.quantizer import read_ops

    model, ops = read_ops(path)
    tensors = model.subgraphs[0].tensors
    dequantized = {t: int(tensors[op["inputs"][0]].type) for op in ops if op["qdq"] for t in op["outputs"]}
    return [{"data": int(tensors[op["inputs"][0]].type), "weights": dequantized.get(op["inputs"][1],
                                                                                      int(tensors[op["inputs"][1]].type)),
             "dequantized": op["inputs"][1] in dequantized} for op in ops if op["type"] == "FULLY_CONNECTED"]


def _outputs(path: Path, xs: np.ndarray) -> np.ndarray:
    from edgeopt.runtime.runners.tflite import open_interpreter, quantize

    sig = open_interpreter(str(path)).get_signature_runner("serving_default")
    (name, detail), = sig.get_input_details().items()
    return np.concatenate([next(iter(sig(**{name: quantize(x[None], detail)}).values())) for x in xs])


@pytest.mark.slow
def test_each_mode_writes_its_own_kind_of_int8(float_tflite, tmp_path):
    """Static: FULLY_CONNECTED computes on int8 data; dynamic-range: float data, int8 weights read directly;
    weight-only: float data, int8 weights through a DEQUANTIZE. Each runs in LiteRT near the float model. The
    quantizer is built as the interface's others are (no arguments: the data is named after the signature)."""
    from edgeopt.converters.backends.tflite.quantizer import TFLiteQuantizer
    from edgeopt.converters.quantize.modes import DynamicMode, QuantMode, StaticMode, WeightsMode
    from edgeopt.data import Dataset

    xs = np.random.default_rng(1).standard_normal((32, 16)).astype(np.float32)
    calib = Dataset({"x": xs}, ranks={"x": 2})
    q = TFLiteQuantizer()
    assert q.modes == (QuantMode.STATIC, QuantMode.DYNAMIC, QuantMode.WEIGHTS)
    made = {m.kind: q.quantize(float_tflite, m, tmp_path / f"{m.kind.value}.tflite", calib=calib)
            for m in (StaticMode(), DynamicMode(), WeightsMode())}
    fc = {k: _fully_connected(m.path) for k, m in made.items()}
    assert [f["data"] for f in fc[QuantMode.STATIC]] == [_INT8, _INT8]
    assert fc[QuantMode.DYNAMIC] == [{"data": _FLOAT32, "weights": _INT8, "dequantized": False}] * 2
    assert fc[QuantMode.WEIGHTS] == [{"data": _FLOAT32, "weights": _INT8, "dequantized": True}] * 2
    ref = _outputs(float_tflite, xs)
    for kind, m in made.items():
        assert m.quantized_units == 2 and m.float_units == 0, kind
        got = _outputs(m.path, xs)
        assert np.mean(got.argmax(1) == ref.argmax(1)) >= 0.9, kind
        # float activations: only the weights' rounding (static's activation ranges are ai-edge-quantizer's moving
        # average of each sample's min/max, which clips the tails of these random inputs: top-1 only)
        if kind != QuantMode.STATIC:
            assert np.abs(got - ref).mean() / np.abs(ref).mean() < 0.05, kind


def test_mode_order_auto_and_pinned():
    """``auto`` tries every mode ai-edge-quantizer offers in the search's order (static with the configured weight
    granularity first, the other granularity last); a pinned mode tries only its own kind."""
    from edgeopt.converters.backends.tflite.quantizer import TFLiteQuantizer
    from edgeopt.converters.quantize.modes import Granularity, QuantMode

    auto = TFLiteQuantizer.mode_configs(QuantMode.AUTO, Granularity.PER_TENSOR)
    assert [m.label() for m in auto] == ["static per-tensor", "dynamic per-channel", "weights per-channel",
                                         "static per-channel"]
    for kind in TFLiteQuantizer.modes:
        pinned = TFLiteQuantizer.mode_configs(kind, Granularity.PER_CHANNEL)
        assert pinned and {m.kind for m in pinned} == {kind}
    assert TFLiteQuantizer.mode_configs(QuantMode.STATIC, Granularity.PER_CHANNEL)[0].granularity == Granularity.PER_CHANNEL
