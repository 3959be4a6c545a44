"""The INT8 searches' option for a model with several outputs, in every backend's search: the output heads found on
the backend's own graph (ONNX nodes, OpenVINO ops, TFLite ops), put right after the first option, and built with
those heads in float while the trunk stays INT8. Models are built here (a two-branch detector: scores and boxes of
two feature scales, reshaped and concatenated)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeopt.converters.quantize.heads import GraphOp, HeadsOption, OpRole, heads_of
from edgeopt.converters.quantize.strategy import with_heads_option

HEAD_CONVS = {"score_fine", "score_coarse", "box_fine", "box_coarse"}


def _op(name, role, ins, outs):
    return GraphOp(name, OpRole(role), tuple(ins), tuple(outs))


def test_the_walk_goes_through_moves_and_bias_adds_and_stops_at_weighted_ops():
    ops = [_op("stem", "weighted", ["x"], ["a"]), _op("act", "other", ["a"], ["b"]),
           _op("head", "weighted", ["b"], ["c"]), _op("bias", "bias", ["c"], ["d"]),
           _op("flat", "move", ["d"], ["e"]), _op("cat", "move", ["e", "g"], ["out"]),
           _op("sigmoid", "other", ["b"], ["g"])]  # a path through a computing op ends there: no head on it
    assert heads_of(ops, ["out"]) == ("cat", "flat", "bias", "head")
    assert heads_of(ops[:2] + [_op("flat", "move", ["b"], ["out"])], ["out"]) == ()  # no weighted op: no heads


def test_the_heads_option_comes_right_after_the_first_and_only_with_heads():
    options = [("preset", 0), ("other", 1)]
    made = with_heads_option(options, HeadsOption(("h",), moving_average=True), lambda h: h.heads)
    assert made == [("preset", 0), ("output heads in float, moving-average calibration", ("h",)), ("other", 1)]
    assert with_heads_option(options, None, lambda h: 9) == options
    assert with_heads_option(options, HeadsOption(()), lambda h: 9) == options


@pytest.mark.openvino
def test_openvino_heads_option_keeps_the_head_convolutions_float_and_the_trunk_int8(tmp_path):
    import nncf
    import openvino as ov
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet
    from test_detector_heads import images, two_branch_detector

    from edgeopt.converters.backends.openvino.heads import output_heads
    from edgeopt.converters.backends.openvino.search import (
        heads_first,
        option_variants,
        types_without_weights,
    )

    two_branch_detector(tmp_path / "det.onnx")
    model = ov.convert_model(str(tmp_path / "det.onnx"))
    heads = output_heads(model)
    assert {h.split("/")[0] for h in heads} >= HEAD_CONVS | {"scores", "boxes"}
    assert not {"stem", "depthwise", "pointwise"} & set(heads)
    common = {"preset": nncf.QuantizationPreset.PERFORMANCE, "subset_size": 16}
    variants = heads_first(nncf, option_variants(nncf, common, False, types_without_weights(model)), heads)
    label, kw = variants[1]
    assert label == "output heads in float, moving-average calibration"
    assert kw["advanced_parameters"].activations_range_estimator_params == RangeEstimatorParametersSet.MEAN_MINMAX
    q = nncf.quantize(model, nncf.Dataset(images(16, seed=2).feeds()), **kw)
    fed_by_fq = {op.get_friendly_name().split("/")[0] for op in q.get_ordered_ops()
                 if op.get_type_name() in ("Convolution", "GroupConvolution")
                 and op.input(0).get_source_output().get_node().get_type_name() == "FakeQuantize"}
    assert fed_by_fq >= {"depthwise", "pointwise"} and not fed_by_fq & HEAD_CONVS
    one_output = ov.convert_model(str(tmp_path / "det.onnx"), output=["scores"])
    assert output_heads(one_output) == ()  # a one-output model's search is unchanged


def _keras_detector(path: Path) -> str:
    """A two-branch detector as a float .tflite (TensorFlow's converter); returns its signature's input name."""
    import tensorflow as tf

    layers = tf.keras.layers
    x = tf.keras.Input((16, 16, 3), batch_size=1)
    f = layers.Conv2D(8, 3, padding="same", activation="relu", name="stem")(x)
    p = layers.MaxPool2D(2)(f)
    scores = [layers.Reshape((-1, 1))(layers.Conv2D(1, 1, name=n)(t)) for n, t in (("score_fine", f), ("score_coarse", p))]
    boxes = [layers.Reshape((-1, 4))(layers.Conv2D(4, 1, name=n)(t)) for n, t in (("box_fine", f), ("box_coarse", p))]
    model = tf.keras.Model(x, [layers.Concatenate(axis=1)(boxes), layers.Concatenate(axis=1)(scores)])
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(model).convert())
    from ai_edge_litert.interpreter import Interpreter

    return next(iter(Interpreter(str(path)).get_signature_runner("serving_default").get_input_details()))


@pytest.mark.slow
@pytest.mark.tflite
def test_tflite_heads_are_found_on_the_tflite_and_kept_float_by_the_quantizer(tmp_path):
    from edgeopt.converters.backends.tflite.heads import output_heads
    from edgeopt.converters.backends.tflite.ops import judged_ops
    from edgeopt.converters.backends.tflite.quantizer import TFLiteQuantizer
    from edgeopt.converters.quantize.modes import StaticMode
    from edgeopt.data import Dataset

    src = tmp_path / "det.tflite"
    name = _keras_detector(src)
    heads = output_heads(src)
    convs = [h for h in heads if "convolution" in h]
    assert sorted(c.split("/")[1].rsplit("_", 1)[0] for c in convs) == sorted(HEAD_CONVS)
    from edgeopt.converters.backends.tflite.search import heads_option
    from edgeopt.converters.quantize.modes import DynamicMode

    assert heads_option(src, StaticMode()) == HeadsOption(heads)  # the search's option after static INT8
    assert heads_option(src, DynamicMode()) is None  # activations float already: no option
    calib = Dataset({name: np.random.default_rng(0).random((8, 16, 16, 3)).astype(np.float32)}, source="noise",
                    synthetic=True, ranks={name: 4})
    made = TFLiteQuantizer(samples=8).quantize(src, StaticMode(), tmp_path / "q.tflite", calib=calib, keep_float=heads)
    verdict = {op["scope"]: v for op, v in judged_ops(made.path)[1] if op["type"].upper() == "CONV_2D"}
    assert all(verdict[c] == "float" for c in convs)
    assert [v for s, v in verdict.items() if "stem" in s] == ["quantized"]
