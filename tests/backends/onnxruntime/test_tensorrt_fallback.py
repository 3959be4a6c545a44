"""The float fallback of ONNX Runtime's INT8 search under the ``tensorrt`` preset: it starts from Q/DQ at
the weighted ops only (what TensorRT fuses) and keeps a graph-order prefix of those ops in float, judged by the one
acceptance rule; a candidate over the bound is never the result, and the result keeps TensorRT's Q/DQ rules.

The small model is built here: six 3x3 convs with ReLU and a linear classifier whose rows are the flattened
features of ten prototype images (labels by construction: the nearest prototype). The first conv writes a
constant 10^4 into one channel that the second conv ignores: in float it changes nothing, but as the second conv's
INT8 input (one scale per tensor) it takes every other channel's values to zero, whatever the placement or the
calibration. Only the first two convs in float (their inputs unquantized) hold the bound: the early-layer loss that
DBNet's activation tails show on a real model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeopt.converters.accuracy_bound import AccuracyBound
from edgeopt.converters.base import ChainContext, Intermediate, StageRecord
from edgeopt.data import Dataset

pytestmark = pytest.mark.onnxruntime

CONVS, CH, CLASSES = 6, 8, 10


def _graph(weights: dict, with_head: bool):
    from onnx import TensorProto, helper, numpy_helper

    n = helper.make_node
    nodes, x = [], "x"
    for i in range(CONVS):
        nodes += [n("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], name=f"conv{i}", pads=[1, 1, 1, 1]),
                  n("Relu", [f"c{i}"], [f"r{i}"], name=f"relu{i}")]
        x = f"r{i}"
    nodes.append(n("Flatten", [x], ["feat"], name="flatten"))
    out = helper.make_tensor_value_info("feat", TensorProto.FLOAT, [1, CH * 64])
    if with_head:
        nodes.append(n("Gemm", ["feat", "fc_w", "fc_b"], ["logits"], name="fc", transB=1))
        out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, CLASSES])
    inits = [numpy_helper.from_array(v, k) for k, v in weights.items() if with_head or not k.startswith("fc")]
    g = helper.make_graph(nodes, "early_outlier", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                   [1, 4, 8, 8])], [out], inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def early_outlier_cnn(path: Path, seed: int = 0) -> np.ndarray:
    """The model described in the module doc, saved at ``path``; returns the ten prototype images [10, 4, 8, 8]."""
    import onnx
    import onnxruntime as ort

    rng = np.random.default_rng(seed)
    w: dict[str, np.ndarray] = {}
    for i in range(CONVS):
        cin = 4 if i == 0 else CH
        w[f"w{i}"] = (rng.standard_normal((CH, cin, 3, 3)) * np.sqrt(2 / (cin * 9))).astype(np.float32)
        w[f"b{i}"] = np.zeros(CH, np.float32)
    w["w0"][0] = 0.0
    w["b0"][0] = 1e4  # the constant tail channel ...
    w["w1"][:, 0] = 0.0  # ... that the second conv ignores
    protos = rng.standard_normal((CLASSES, 4, 8, 8)).astype(np.float32)
    features = ort.InferenceSession(_graph(w, False).SerializeToString(), providers=["CPUExecutionProvider"])
    f = np.concatenate([features.run(None, {"x": p[None]})[0] for p in protos])
    centred = f - f.mean(0)
    w["fc_w"] = (centred / np.linalg.norm(centred, axis=1, keepdims=True)).astype(np.float32)
    w["fc_b"] = (-(w["fc_w"] * f.mean(0)).sum(1)).astype(np.float32)
    onnx.save(_graph(w, True), str(path))
    return protos


def prototype_data(protos: np.ndarray, n: int, seed: int) -> Dataset:
    rng = np.random.default_rng(seed)
    c = rng.integers(0, len(protos), n)
    x = (protos[c] + 0.2 * rng.standard_normal((n, *protos.shape[1:]))).astype(np.float32)
    return Dataset({"x": x}, c.astype(np.int64), source="prototype images (labels by construction)", synthetic=True,
                   ranks={"x": 4})


def _quantize(tmp_path: Path, preset: str, budget: float = 120):
    from edgeopt.converters.quantize import QdqConfig, QdqStage

    model = tmp_path / "cnn.onnx"
    protos = early_outlier_cnn(model)
    calib, ev = prototype_data(protos, 48, seed=1), prototype_data(protos, 200, seed=2)
    (tmp_path / "art").mkdir(exist_ok=True)
    ctx = ChainContext(work_dir=tmp_path, artifact_dir=tmp_path / "art", reference_model=model, calib=calib, eval=ev,
                       check_samples=ev.subset(np.arange(8)), threads=1, record=StageRecord("qdq", {}))
    config = QdqConfig(mode="static", preset=preset,
                            bound=AccuracyBound(max_accuracy_drop=2.0, search_budget=budget))
    out = QdqStage().run(Intermediate(model), config, ctx)
    return out, ctx.record.report


def test_the_tensorrt_fallback_keeps_a_graph_order_prefix_of_the_weighted_ops_in_float(tmp_path):
    """Every option misses (the tail channel sits in the second conv's INT8 input however it is placed or
    calibrated); the fallback then starts from the weighted-ops-only option and keeps its first convs in float, their
    number bisected from the half: the first conv alone misses and is not chosen, the first two meet the bound, the
    rest stay INT8, and the model keeps TensorRT's Q/DQ rules."""
    import onnx

    from edgeopt.converters.backends.onnxruntime.tensorrt_qdq import check_tensorrt_qdq

    out, report = _quantize(tmp_path, "tensorrt")
    aa = report["accuracy_aware"]
    assert aa["tried"][0]["what"] == "preset" and aa["tried"][0]["search_drop_points"] > 2
    assert [t["what"] for t in aa["tried"][1:3]] == [
        "weighted ops only (Add/Mul/activations/normalisation in float)", "weighted ops only, calibration percentile"]
    assert any(t["what"].startswith("weighted ops only") for t in aa["tried"])
    prefix = aa["float_prefix"]
    assert prefix["base"].startswith("weighted ops only") and prefix["weighted_ops"] == CONVS + 1
    assert prefix["tried"] == [3, 1, 2]  # bisected from the half: a hit, a miss, the smallest hit
    first = next(t for t in aa["tried"] if "first 1 of" in t["what"])
    assert not first.get("met") and first["search_drop_points"] > 2  # over the bound: tried, not chosen
    assert aa["met"] and "first 2 of 7 weighted op(s) in float" in aa["chosen"]
    assert [k["node"] for k in aa["kept_in_float"]] == ["conv0", "conv1"]
    assert aa["confirm_drop_points"] <= 2
    assert report["quantized"]["quantized_units"] == CONVS + 1 - 2
    check = check_tensorrt_qdq(onnx.load(str(out.path)))
    assert check.passed and check.quantized_linear_ops == CONVS + 1 - 2


def test_another_preset_has_no_graph_order_fallback():
    """The graph-order prefix is the TensorRT preset's (its Q/DQ sit at the weighted ops only); the CPU presets
    keep the ranking by sensitivity alone."""
    from edgeopt.converters.quantize.accuracy_aware import WEIGHTED_LABEL, _variants, tensorrt_prefix
    from edgeopt.converters.quantize.candidate import Candidate
    from edgeopt.converters.quantize.presets import PRESETS, TENSORRT
    from edgeopt.converters.quantize.qdq_static import StaticSettings

    variants = _variants(StaticSettings.from_preset(PRESETS[TENSORRT]), tensorrt=True)
    assert tensorrt_prefix("x86-vnni", variants) is None and tensorrt_prefix(None, variants) is None
    fp = tensorrt_prefix(TENSORRT, variants)
    assert [label for label, _ in variants][0] == "preset" and len(variants) == 4  # no other all-ops calibration
    assert len(fp.bases) == 3 and all(variants[i][0].startswith(WEIGHTED_LABEL) for i in fp.bases)
    assert "per-tensor weights, calibration percentile" in variants[3][0] and not variants[3][1].per_channel
    assert len(_variants(StaticSettings.from_preset(PRESETS["x86-vnni"]))) > 3
    scored = {0: Candidate("preset", search_value=90.0), fp.bases[0]: Candidate("a", search_value=60.0),
              fp.bases[1]: Candidate("b", search_value=80.0)}
    assert fp.base(scored) == fp.bases[1]  # the better weighted-only option, never the preset
    assert fp.base({0: scored[0]}) is None


@pytest.mark.slow
@pytest.mark.realmodels
def test_dbnet_tensorrt_int8_holds_the_bound_with_a_float_prefix(tmp_path):
    """The text detector (rapidocr's PP-OCRv4 DBNet) on rendered pages, judged by map IoU against FP32 at
    the detector's 0.3: every option loses ~30 points (activation tails of the early HardSwish blocks); the
    graph-order prefix holds --max-accuracy-drop 2 on the part the search never saw, keeps convs quantized and
    passes TensorRT's Q/DQ rules."""
    import onnx

    from edgeopt.converters.backends.onnxruntime.tensorrt_qdq import check_tensorrt_qdq
    from edgeopt.converters.quantize import QdqConfig, QdqStage
    from edgeopt.metrics import MetricSpec
    from fixtures.datasets import render_page
    from fixtures.real_models import package_dir

    root = package_dir("rapidocr_onnxruntime")
    model = root / "models" / "ch_PP-OCRv4_det_infer.onnx" if root else None
    if model is None or not model.is_file():
        pytest.skip("rapidocr-onnxruntime is not installed")
    rng = np.random.default_rng(5)
    mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
    pages = np.stack([((render_page(rng, 320, 320) / 255.0 - mean) / std).transpose(2, 0, 1).astype(np.float32)
                      for _ in range(56)])
    calib = Dataset({"x": pages[:16]}, None, "rendered pages", True, {"x": 4})
    ev = Dataset({"x": pages[16:]}, None, "rendered pages", True, {"x": 4})
    (tmp_path / "art").mkdir()
    ctx = ChainContext(work_dir=tmp_path, artifact_dir=tmp_path / "art", reference_model=model, calib=calib, eval=ev,
                       check_samples=ev.subset(np.arange(4)), threads=2, record=StageRecord("qdq", {}))
    bound = AccuracyBound(max_accuracy_drop=2.0, search_budget=240, metric=MetricSpec(name="map_iou", threshold=0.3))
    out = QdqStage().run(Intermediate(model), QdqConfig(mode="static", preset="tensorrt", bound=bound), ctx)
    aa = ctx.record.report["accuracy_aware"]
    assert aa["met"] and "weighted op(s) in float (graph order)" in aa["chosen"]
    assert aa["confirm_drop_points"] <= 2
    assert ctx.record.report["quantized"]["quantized_units"] > 0
    assert check_tensorrt_qdq(onnx.load(str(out.path))).passed


def test_a_graph_with_convs_and_matmuls_gets_a_matmul_only_option():
    """The recogniser's conv backbone loses, its matmul neck doesn't: Q/DQ at the matmuls only is an option (last,
    and one of the TensorRT preset's weighted-only bases), offered only where the graph has convs and a matmul neck
    (a CNN's one Gemm head alone INT8 would hold the bound before the float fallback could keep most convs INT8)."""
    from edgeopt.converters.quantize.accuracy_aware import MATMUL_OPS, _variants, tensorrt_prefix
    from edgeopt.converters.quantize.presets import PRESETS, TENSORRT
    from edgeopt.converters.quantize.qdq_static import StaticSettings

    both = {"Conv": 38, "MatMul": 13, "Add": 40}  # the recogniser's counts
    cpu = _variants(StaticSettings.from_preset(PRESETS["x86-vnni"]), op_counts=both)
    assert tuple(cpu[-1][1].op_types_to_quantize) == MATMUL_OPS and "convolutions in float" in cpu[-1][0]
    trt = _variants(StaticSettings.from_preset(PRESETS[TENSORRT]), tensorrt=True, op_counts=both)
    assert tuple(trt[-1][1].op_types_to_quantize) == MATMUL_OPS
    assert len(trt) - 1 in tensorrt_prefix(TENSORRT, trt).bases
    for only in ({"Conv": 6, "Relu": 6}, {"MatMul": 36, "Add": 50}, {"Conv": 6, "Gemm": 1}):  # a CNN's Gemm head: none
        options = _variants(StaticSettings.from_preset(PRESETS["x86-vnni"]), op_counts=only)
        assert all("convolutions in float" not in label for label, _ in options)
