"""INT8 for the engine that runs it: the Jetson profiles quantize with the ``tensorrt`` preset
(symmetric signed INT8, per-channel weights, float biases), the ONNX Runtime stage checks a QDQ model against
TensorRT's explicit-quantization rules before it is shipped, and the manifest says where it was checked.

Real model and data: the bundled MNIST CNN with its human-labelled test split, quantized by ONNX Runtime's real
quantizer. The rule-breaking graphs are built here, named for what they break.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgeopt.converters.backends.onnxruntime.tensorrt_qdq import TrtRule, check_tensorrt_qdq
from edgeopt.errors import StageError
from edgeopt.plan import make_plan
from edgeopt.profiles import load_profile

REPO = Path(__file__).resolve().parents[3]
MNIST = REPO / "fixtures" / "models" / "mnist_cnn.onnx"
DATA = REPO / "fixtures" / "data"
TRT = "TensorrtExecutionProvider"


def _quantize(plan):
    return next(s for s in plan.stages if s.name == "qdq")


@pytest.mark.parametrize("profile", ["jetson-orin-nano", "jetson-agx-orin"])
def test_the_jetson_plan_quantizes_with_the_tensorrt_preset(profile):
    q = _quantize(make_plan(load_profile(profile), backend="onnxruntime", precision="int8"))
    assert q.config.profile_preset == "tensorrt"  # not the Orin CPU's arm64-dotprod
    assert "TensorRT execution provider" in q.config.profile_preset_reason
    assert "profile_preset=tensorrt" in str(make_plan(load_profile(profile), backend="onnxruntime", precision="int8"))


def test_the_boards_cpu_backend_keeps_the_cpu_preset():
    q = _quantize(make_plan(load_profile("jetson-orin-nano"), backend="tvm", precision="int8"))
    assert q.config.profile_preset == "arm64-dotprod"


def test_the_tensorrt_preset_is_symmetric_signed_int8_per_channel():
    from edgeopt.converters.quantize.presets import QType, get_preset

    p = get_preset("tensorrt")
    assert (p.activation_type, p.weight_type) == (QType.QINT8, QType.QINT8)
    assert p.activation_symmetric and p.weight_symmetric and p.per_channel and not p.quantize_bias


# ------------------------------------------------------------------ the real quantizer, converted for the Orin


@pytest.fixture(scope="module")
def orin_int8(tmp_path_factory):
    from edgeopt import convert

    out = tmp_path_factory.mktemp("trt") / "mnist-orin"
    convert(MNIST, "jetson-orin", out, precision="int8", calib=DATA / "mnist_calib.npz", eval=DATA / "mnist_test.npz")
    return out


def _stage(manifest, name):
    return next(s for s in manifest["stages"] if s["name"] == name)


@pytest.mark.slow
@pytest.mark.onnxruntime
def test_the_orin_int8_model_meets_tensorrts_rules(orin_int8):
    manifest = json.loads((orin_int8 / "manifest.json").read_text())
    assert _stage(manifest, "qdq")["report"]["preset"] == "tensorrt"
    ort_stage = _stage(manifest, "onnxruntime")
    assert ort_stage["checks"]["tensorrt_qdq_passed"] is True
    assert ort_stage["report"]["tensorrt_qdq"]["quantized_linear_ops"] == 5
    model = onnx.load(str(orin_int8 / "model.onnx"))
    assert check_tensorrt_qdq(model).violations == ()
    inits = {t.name: t for t in model.graph.initializer}
    qdq = [n for n in model.graph.node if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    zero_points = [inits[n.input[2]] for n in qdq]
    assert {z.data_type for z in zero_points} == {TensorProto.INT8}  # signed, and no int32 bias
    assert all(not numpy_helper.to_array(z).any() for z in zero_points)  # symmetric: every zero point 0
    weights = [n for n in qdq if n.op_type == "DequantizeLinear" and n.input[0] in inits]
    assert weights and all(numpy_helper.to_array(inits[n.input[1]]).size > 1 for n in weights)  # per channel


@pytest.mark.slow
@pytest.mark.onnxruntime
def test_the_manifest_and_inspect_say_where_it_was_checked(orin_int8, cli):
    on = json.loads((orin_int8 / "manifest.json").read_text())["validation"]["checked_on"]
    assert on["provider"] == "CPUExecutionProvider" and on["target"] == TRT
    assert TRT in on["why"]
    r = cli("inspect", str(orin_int8))
    assert r.returncode == 0
    assert f"checked on CPUExecutionProvider, not the artifact's {TRT}" in r.stdout


@pytest.mark.slow
@pytest.mark.onnxruntime
def test_a_cpu_preset_for_the_orin_gpu_fails_the_stage_naming_nodes(tmp_path):
    """The x86 preset (uint8 activations, asymmetric) forced on the Jetson by a recipe: the pre-flight check stops
    it before anything is written."""
    from edgeopt import convert

    recipe = tmp_path / "r.yaml"
    recipe.write_text("stages:\n  qdq: {preset: x86-vnni}\n")
    with pytest.raises(StageError) as e:
        convert(MNIST, "jetson-orin", tmp_path / "out", precision="int8", recipe=recipe,
                calib=DATA / "mnist_calib.npz")
    assert "TensorRT's explicit-quantization rules" in e.value.message
    assert "zero-point-0" in e.value.message and "signed-int8" in e.value.message
    broken: dict[str, set] = {}
    for v in e.value.details["tensorrt_qdq"]["violations"]:
        broken.setdefault(v["node"], set()).add(v["rule"])
    # the logits are quantized asymmetrically (uint8, a zero point not 0): named
    assert broken["logits_QuantizeLinear"] == {"signed-int8", "zero-point-0"}
    assert "logits_QuantizeLinear (zero point [" in e.value.message
    assert "tensorrt preset" in e.value.hint
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.onnxruntime
def test_nodes_kept_in_float_are_named_not_refused(tmp_path):
    """What the INT8 search does (nodes_to_exclude): the excluded Conv and Gemm get a DQ'd input and a float
    weight. TensorRT runs them in float; the artifact is written and the warning names them."""
    from edgeopt import convert

    recipe = tmp_path / "r.yaml"
    recipe.write_text('stages:\n  qdq: {nodes_to_exclude: ["/4/Conv_output_0", "/16/Gemm"]}\n')
    out = tmp_path / "out"
    convert(MNIST, "jetson-orin", out, precision="int8", recipe=recipe, calib=DATA / "mnist_calib.npz")
    manifest = json.loads((out / "manifest.json").read_text())
    facts = _stage(manifest, "onnxruntime")["report"]["tensorrt_qdq"]
    assert facts["violations"] == [] and facts["quantized_linear_ops"] == 3
    assert sorted(p["node"] for p in facts["placement"]) == ["/16/Gemm", "/4/Conv_output_0"]
    assert any("will run in float on TensorRT" in w and "/16/Gemm" in w for w in manifest["warnings"])
    floats = manifest["runtime"]["float_layers"]  # at the precision they were judged at: FP32, TensorRT's FP16 off
    assert floats["precision"] == "fp32" and sorted(floats["nodes"]) == ["/16/Gemm", "/4/Conv_output_0"]


# ------------------------------------------------------------------ rule-breaking graphs, made here


def _conv_qdq(act_type=TensorProto.INT8, act_zp=0, w_axis=0, w_scale=None):
    """input -> Q -> DQ -> Conv(weight through DQ) -> output, with the activation's type and zero point and the
    weight DQ's axis and scale as given."""
    w = np.ones((4, 1, 3, 3), np.int8)
    w_scale = np.full(4, 0.1, np.float32) if w_scale is None else w_scale
    inits = [
        helper.make_tensor("x_scale", TensorProto.FLOAT, [], [0.02]),
        helper.make_tensor("x_zp", act_type, [], [act_zp]),
        numpy_helper.from_array(w, "w_q"),
        numpy_helper.from_array(w_scale, "w_scale"),
        numpy_helper.from_array(np.zeros(w_scale.shape, np.int8), "w_zp"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["x_q"], name="input_QuantizeLinear"),
        helper.make_node("DequantizeLinear", ["x_q", "x_scale", "x_zp"], ["x_dq"], name="input_DequantizeLinear"),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["w_dq"], name="w_DequantizeLinear",
                         axis=w_axis),
        helper.make_node("Conv", ["x_dq", "w_dq"], ["y"], name="conv1"),
    ]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _rules(model) -> dict[str, set[TrtRule]]:
    out: dict[str, set[TrtRule]] = {}
    for v in check_tensorrt_qdq(model).violations:
        out.setdefault(v.node, set()).add(v.rule)
    return out


def test_a_symmetric_int8_per_channel_graph_passes():
    report = check_tensorrt_qdq(_conv_qdq())
    assert report.passed and report.quantized_linear_ops == 1 and report.qdq_nodes == 3


def test_an_asymmetric_uint8_graph_is_caught_by_node():
    rules = _rules(_conv_qdq(act_type=TensorProto.UINT8, act_zp=128))
    assert rules["input_QuantizeLinear"] == {TrtRule.SIGNED_INT8, TrtRule.ZERO_POINT_0}
    assert rules["input_DequantizeLinear"] == {TrtRule.SIGNED_INT8, TrtRule.ZERO_POINT_0}
    assert "conv1" not in rules and "w_DequantizeLinear" not in rules


def test_a_weight_scale_on_the_wrong_axis_is_caught():
    rules = _rules(_conv_qdq(w_axis=1))
    assert rules == {"w_DequantizeLinear": {TrtRule.PER_CHANNEL_WEIGHT}}


def test_a_conv_with_a_float_weight_next_to_a_dq_input_is_named_as_running_in_float():
    """A node the INT8 search kept in float gets its data through DQ and a float weight: legal, and said."""
    model = _conv_qdq()
    conv = model.graph.node[3]
    conv.input[1] = "w_float"
    model.graph.initializer.append(numpy_helper.from_array(np.ones((4, 1, 3, 3), np.float32), "w_float"))
    report = check_tensorrt_qdq(model)
    assert report.passed and report.quantized_linear_ops == 0
    assert [(p.node, p.rule) for p in report.placement] == [("conv1", TrtRule.INPUTS_THROUGH_DQ)]


def test_a_per_tensor_weight_is_counted_not_refused():
    report = check_tensorrt_qdq(_conv_qdq(w_scale=np.array(0.1, np.float32)))
    assert report.passed and report.per_tensor_weights == ("w_DequantizeLinear",)


@pytest.mark.onnxruntime
def test_the_onnxruntime_stage_refuses_a_rule_breaking_model_for_tensorrt(tmp_path):
    from edgeopt.converters.backends.onnxruntime.stage import OnnxRuntimeBackend, OnnxRuntimeConfig
    from edgeopt.converters.base import ChainContext, Format, Intermediate, StageRecord
    from edgeopt.enums import Precision

    src = tmp_path / "asym.onnx"
    onnx.save(_conv_qdq(act_type=TensorProto.UINT8, act_zp=128), str(src))
    ctx = ChainContext(work_dir=tmp_path, artifact_dir=tmp_path / "art", reference_model=src)
    ctx.artifact_dir.mkdir()
    ctx.record = StageRecord(name="onnxruntime", config={})
    with pytest.raises(StageError) as e:
        OnnxRuntimeBackend().run(Intermediate(src, Format.ONNX, Precision.INT8, {}), OnnxRuntimeConfig(provider=TRT),
                                 ctx)
    assert "input_QuantizeLinear" in e.value.message and "zero-point-0" in e.value.message
    assert ctx.record.checks["tensorrt_qdq_passed"] is False
    # the same model for the CPU provider is not TensorRT's business
    OnnxRuntimeBackend().run(Intermediate(src, Format.ONNX, Precision.INT8, {}), OnnxRuntimeConfig(), ctx)
