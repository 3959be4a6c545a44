"""A two-branch detector under static INT8 (ONNX Runtime): scores of two feature scales reshaped and concatenated
into one output, boxes likewise, and a depthwise -> pointwise block whose channels differ in range by 100x.

A few calibration images drive the coarse branch's scores to thousands below zero while the decisions sit near 0:
with the preset, the concatenated score output shares one scale and every score becomes the same step (the map at
the decision threshold is lost). The search's option for a model with several outputs (heads in float, depthwise
pairs equalized, moving-average calibration) keeps the decisions. The model is built here, weights by a seed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeopt.data import Dataset

pytestmark = pytest.mark.onnxruntime
PRESET = "arm64"  # U8 activations, S8 per-channel weights: the settings are pinned, whatever this CPU is


def two_branch_detector(path: Path, seed: int = 0) -> None:
    """x[1,3,16,16] -> conv 3->8, relu -> depthwise 3x3 (one channel x100) -> pointwise 8->8, relu -> heads at 16x16
    (score conv 8->1, box conv 8->4 with coordinates in the hundreds) and, after a 2x2 max-pool, at 8x8; scores
    reshaped to [1,P,1] and concatenated, boxes to [1,P,4] and concatenated (P = 256 + 64)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    dw = rng.normal(size=(8, 1, 3, 3)).astype(np.float32) / 3
    dw[0] *= 100.0  # an outlier channel: one scale for the depthwise output wipes out the others
    pw = rng.normal(size=(8, 8, 1, 1)).astype(np.float32) / 3
    pw[:, 0] /= 100.0
    const = {"w0": rng.normal(size=(8, 3, 3, 3)).astype(np.float32) / 2, "dw": dw, "pw": pw,
             "ws8": rng.normal(size=(1, 8, 1, 1)).astype(np.float32) * 3, "bs8": np.array([0.0], np.float32),
             "wb8": rng.normal(size=(4, 8, 1, 1)).astype(np.float32) * 100, "ws16": -50 * np.abs(rng.normal(size=(1, 8, 1, 1))).astype(np.float32),
             "bs16": np.array([1.0], np.float32), "wb16": rng.normal(size=(4, 8, 1, 1)).astype(np.float32) * 100,
             "s1": np.array([1, -1, 1], np.int64), "s4": np.array([1, -1, 4], np.int64)}
    n = helper.make_node
    nodes = [n("Conv", ["x", "w0"], ["c0"], name="stem", pads=[1, 1, 1, 1]), n("Relu", ["c0"], ["r0"], name="relu0"),
             n("Conv", ["r0", "dw"], ["d"], name="depthwise", group=8, pads=[1, 1, 1, 1]),
             n("Conv", ["d", "pw"], ["p"], name="pointwise"), n("Relu", ["p"], ["f"], name="relu1"),
             n("MaxPool", ["f"], ["f2"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             n("Conv", ["f", "ws8", "bs8"], ["s8"], name="score_fine"), n("Conv", ["f", "wb8"], ["b8"], name="box_fine"),
             n("Conv", ["f2", "ws16", "bs16"], ["s16"], name="score_coarse"),
             n("Conv", ["f2", "wb16"], ["b16"], name="box_coarse")]
    for t in ("s8", "s16", "b8", "b16"):
        nodes += [n("Transpose", [t], [t + "_t"], name=t + "_nhwc", perm=[0, 2, 3, 1]),
                  n("Reshape", [t + "_t", "s1" if t[0] == "s" else "s4"], [t + "_r"], name=t + "_flat")]
    nodes += [n("Concat", ["s8_r", "s16_r"], ["scores"], name="scores", axis=1),
              n("Concat", ["b8_r", "b16_r"], ["boxes"], name="boxes", axis=1)]
    graph = helper.make_graph(nodes, "two_branch_detector",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, 320, 4]),
                               helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 320, 1])],
                              [numpy_helper.from_array(v, k) for k, v in const.items()])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


def images(n: int, seed: int, outliers: int = 0) -> Dataset:
    """Smooth random images in [0, 1]; the last ``outliers`` scaled 30x (the coarse scores go to thousands)."""
    rng = np.random.default_rng(seed)
    x = rng.random((n, 3, 16, 16)).astype(np.float32)
    x = (x + np.roll(x, 1, 2) + np.roll(x, 1, 3)) / 3
    x[n - outliers:] *= 30.0
    return Dataset({"x": x.astype(np.float32)}, source="smooth noise", synthetic=True, ranks={"x": 4})


def _run(path: Path, data: Dataset) -> list[list[np.ndarray]]:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return [sess.run(None, f) for f in data.feeds()]


def _score_iou(ref, got) -> float:
    """Mean IoU of the positions with a positive score (logit > 0), FP32 vs the candidate."""
    ious = []
    for r, g in zip(ref, got, strict=True):
        a, b = r[1] > 0, g[1] > 0
        ious.append((a & b).sum() / (a | b).sum() if (a | b).any() else 1.0)
    return 100.0 * float(np.mean(ious))


def test_output_heads_are_the_last_weighted_ops_and_the_moves_after_them(tmp_path):
    import onnx

    from edgeopt.converters.quantize.heads import multi_output_heads

    two_branch_detector(tmp_path / "det.onnx")
    heads = set(multi_output_heads(onnx.load(str(tmp_path / "det.onnx"))))
    assert {"score_fine", "score_coarse", "box_fine", "box_coarse", "scores", "boxes", "s8_flat", "b16_nhwc"} <= heads
    assert not heads & {"stem", "depthwise", "pointwise", "relu1", "pool"}


def test_equalizing_depthwise_pairs_keeps_the_function_and_balances_the_channels(tmp_path):
    import onnx

    from edgeopt.converters.quantize.equalize import channel_ranges, equalizable_pairs, equalize

    src, dst = tmp_path / "det.onnx", tmp_path / "eq.onnx"
    two_branch_detector(src)
    data = images(8, seed=1)
    assert equalize(src, dst, data, ["x"]) == 1
    assert [(a.name, b.name) for a, b in equalizable_pairs(onnx.load(str(dst)))] == [("depthwise", "pointwise")]
    for r, e in zip(_run(src, data), _run(dst, data), strict=True):
        for a, b in zip(r, e, strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-3 * float(np.abs(a).max()))
    before, after = (channel_ranges(onnx.load(str(p)), ["d"], data, ["x"], 8)[0] for p in (src, dst))
    assert before.max() / np.median(before) > 5 * after.max() / np.median(after)  # the outlier channel tamed


@pytest.mark.slow
def test_heads_in_float_keep_the_score_decisions_the_preset_loses(tmp_path):
    import onnx

    from edgeopt.converters.quantize.accuracy_aware import HEADS_LABEL, _variants
    from edgeopt.converters.quantize.heads import multi_output_heads
    from edgeopt.converters.quantize.presets import get_preset
    from edgeopt.converters.quantize.qdq_static import StaticSettings, quantize_static

    src = tmp_path / "det.onnx"
    two_branch_detector(src)
    calib, ev = images(32, seed=2, outliers=3), images(24, seed=3)
    variants = dict(_variants(StaticSettings.from_preset(get_preset(PRESET)),
                              heads=multi_output_heads(onnx.load(str(src)))))
    assert list(variants)[:2] == ["preset", HEADS_LABEL]
    ref = _run(src, ev)
    scored = {}
    for label in ("preset", HEADS_LABEL):
        q = quantize_static(src, tmp_path / f"{len(scored)}.onnx", variants[label], calib, ["x"])
        scored[label] = _score_iou(ref, _run(q, ev))
    assert scored["preset"] < 60.0  # one scale for both branches' scores: the decisions are lost
    assert scored[HEADS_LABEL] > 90.0
