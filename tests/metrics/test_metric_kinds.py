"""Each output judged by what it means: the kind chosen per output (classifier, regression, ordered bins,
segmentation map, embedding), labels matched to the output they fit, and the CLI's --metric-output and
--metric OUTPUT=KIND. Small synthetic models (numpy outputs, or ONNX built with onnx.helper)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from edgeopt.errors import BadDataError, UsageError
from edgeopt.metrics import MetricName, MetricSpec, metric_for_outputs, parse_metric_spec

RNG = np.random.default_rng(0)
N = 32


def _softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _outs(**arrays):
    """Per-sample output dicts (batch 1) from arrays [N, ...]."""
    return [{k: v[i:i + 1].astype(np.float32) for k, v in arrays.items()} for i in range(N)]


def test_classifier_logits_are_judged_by_top1():
    m = metric_for_outputs(_outs(y=RNG.normal(size=(N, 10))), None)
    assert m.kind == MetricName.TOP1 and "one score per class" in m.why


def _face_stage():
    box, lmk = RNG.normal(0, 0.1, (N, 4)), RNG.uniform(0.2, 0.8, (N, 10))
    prob = _softmax(RNG.normal(0, 3, (N, 2)))
    return box, lmk, prob


def test_face_stage_regressions_judged_by_relative_error_and_the_face_decision_by_top1():
    box, lmk, prob = _face_stage()
    m = metric_for_outputs(_outs(out0=box, out1=lmk, out2=prob), None)
    kinds = {p.output: p.kind for p in m.parts}
    assert kinds == {"out0": MetricName.RELATIVE_ERROR, "out1": MetricName.RELATIVE_ERROR, "out2": MetricName.TOP1}
    assert "beside the class output 'out2'" in m.parts[0].why
    noisy = _outs(out0=box + RNG.normal(0, 0.002, box.shape), out1=lmk + RNG.normal(0, 0.002, lmk.shape), out2=prob)
    assert m.drop(m.score_outputs(noisy)) < 1.0  # small noise: within a point (argmax of box deltas would flip)
    top1 = metric_for_outputs(_outs(out0=box, out1=lmk, out2=prob), None, MetricSpec(name="top1", output="out0"))
    assert top1.drop(top1.score_outputs(noisy)) >= 0  # the old reading, for contrast: kept as asked


def _bins(centres, n_bins=128, width=3.0):
    x = np.arange(n_bins)[None, :]
    return 1 / (1 + np.exp(np.minimum(((x - centres[:, None]) / width) ** 2 - 4, 50)))  # sigmoid bump around each centre


def test_ordered_bins_judged_by_peak_position_within_bins():
    centres = RNG.uniform(10, 118, N)
    m = metric_for_outputs(_outs(pitch=_bins(centres)), None)
    assert m.kind == MetricName.ORDERED_BINS and "smooth peak" in m.why
    shifted = _outs(pitch=_bins(centres + 1.0))  # the top bin moves by one bin on many rows
    assert m.score_outputs(shifted) == 100.0
    far = _outs(pitch=_bins(centres + 5.0))
    assert m.score_outputs(far) == 0.0


def test_segmentation_map_judged_off_the_background():
    logits = RNG.normal(0, 1, (N, 4, 8, 8))
    logits[:, 0] += 3.0  # mostly background
    m = metric_for_outputs(_outs(seg=logits), None)
    assert m.kind == MetricName.POSITION_AGREEMENT and "background left out" in m.description
    flipped = logits.copy()
    fg = np.argmax(logits, axis=1) != 0
    flipped[:, 0][fg] += 10.0  # every foreground position called background
    assert m.score_outputs(_outs(seg=flipped)) == 0.0  # over all positions it would still be high


def test_per_anchor_scores_judged_where_fp32_is_confident():
    scores = RNG.normal(-4, 2, (N, 96, 1))  # logits, one per anchor: mostly no face
    boxes = RNG.normal(0, 10, (N, 96, 16))
    m = metric_for_outputs(_outs(regressors=boxes, classificators=scores), None)
    kinds = {p.output: p.kind for p in m.parts}
    assert kinds == {"regressors": MetricName.RELATIVE_ERROR, "classificators": MetricName.MAP_IOU}


def test_unit_norm_embedding_judged_by_cosine():
    e = RNG.normal(size=(N, 64))
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    assert metric_for_outputs(_outs(v=e), None).kind == MetricName.COSINE


def test_labels_for_the_third_output_are_found_and_used():
    box, lmk, prob = _face_stage()
    labels = np.argmax(prob, axis=1)
    labels[:3] = 1 - labels[:3]  # FP32 not perfect on them
    m = metric_for_outputs(_outs(out0=box, out1=lmk, out2=prob), labels)
    assert m.output == "out2" and m.labels_used and m.fp32_value == pytest.approx(100 * (N - 3) / N)


def test_labels_that_fit_two_outputs_equally_ask_which():
    prob = _softmax(RNG.normal(0, 3, (N, 2)))
    labels = np.argmax(prob, axis=1)
    with pytest.raises(UsageError) as e:
        metric_for_outputs(_outs(a=prob, b=prob.copy()), labels)
    assert e.value.exit_code == 2 and "'a' and 'b'" in e.value.message and "--metric-output" in e.value.hint
    assert metric_for_outputs(_outs(a=prob, b=prob.copy()), labels, MetricSpec(output="b")).output == "b"


def test_wrong_labels_name_the_output_and_the_chance_of_the_labels_given():
    box, lmk, prob = _face_stage()
    labels = 1 - np.argmax(prob, axis=1)
    with pytest.raises(BadDataError) as e:
        metric_for_outputs(_outs(out0=box, out1=lmk, out2=prob), labels, MetricSpec(output="out2"))
    assert "output 'out2'" in e.value.message and "chance is 50 %" in e.value.message


def test_metric_output_kind_overrides_and_their_refusals():
    spec = parse_metric_spec("out0=top1,out1=relative_error")
    assert spec.kinds == {"out0": MetricName.TOP1, "out1": MetricName.RELATIVE_ERROR} and spec.name is None
    box, lmk, prob = _face_stage()
    m = metric_for_outputs(_outs(out0=box, out1=lmk, out2=prob), None, spec)
    assert [p.kind for p in m.parts] == [MetricName.TOP1, MetricName.RELATIVE_ERROR, MetricName.TOP1]
    assert "asked" in m.parts[0].why
    tf_names = parse_metric_spec("StatefulPartitionedCall:0=relative_error")  # a TF export's output name
    assert tf_names.kinds == {"StatefulPartitionedCall:0": MetricName.RELATIVE_ERROR} and tf_names.custom is None
    assert MetricSpec.model_validate("out0=cosine").kinds == {"out0": MetricName.COSINE}  # a recipe's `metric:`
    with pytest.raises(UsageError) as e:
        parse_metric_spec("out0=relative_eror")
    assert e.value.exit_code == 2 and "did you mean 'relative_error'" in e.value.hint
    with pytest.raises(UsageError) as e:
        metric_for_outputs(_outs(out0=box, out1=lmk, out2=prob), None, parse_metric_spec("ou2=top1"))
    assert e.value.exit_code == 2 and "did you mean 'out2'" in e.value.hint


# ------------------------------------------------------------------ the CLI, on a 3-output ONNX model
def _face_stage_onnx(path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = {k: RNG.normal(0, 0.3, (8, c)).astype(np.float32) for k, c in (("w0", 4), ("w1", 10), ("w2", 2))}
    nodes = [helper.make_node("MatMul", ["x", "w0"], ["box"]), helper.make_node("MatMul", ["x", "w1"], ["lmk"]),
             helper.make_node("MatMul", ["x", "w2"], ["z"]), helper.make_node("Softmax", ["z"], ["prob"], axis=-1)]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, c]) for n, c in (("box", 4), ("lmk", 10),
                                                                                      ("prob", 2))]
    g = helper.make_graph(nodes, "face_stage", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          outs, [numpy_helper.from_array(v, k) for k, v in w.items()])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    x = RNG.normal(size=(24, 8)).astype(np.float32)
    labels = np.argmax(x @ w["w2"], axis=1)
    return x, labels


@pytest.fixture()
def face_stage(tmp_path):
    model = tmp_path / "face.onnx"
    x, labels = _face_stage_onnx(model)
    np.savez(tmp_path / "calib.npz", x=x)
    np.savez(tmp_path / "eval.npz", x=x, labels=labels)
    return model, tmp_path


def _dry_run(model, *flags):
    """``convert --dry-run --json`` in process: (exit code, its JSON or the error's one line)."""
    from typer.testing import CliRunner

    from edgeopt.cli import _register, app
    from edgeopt.errors import EdgeoptError

    _register()
    res = CliRunner().invoke(app, ["convert", str(model), "--profile", "host", "--dry-run", "--json", *flags])
    if isinstance(res.exception, EdgeoptError):
        return int(res.exception.exit_code), res.exception.one_line()
    return res.exit_code, (json.loads(res.stdout) if res.exit_code == 0 else res.output)


def test_dry_run_names_each_outputs_kind_and_why(face_stage):
    model, d = face_stage
    code, out = _dry_run(model, "--calib", str(d / "calib.npz"))
    assert code == 0, out
    assert [(c["output"], c["kind"]) for c in out["metric"]] == [
        ("box", "relative_error"), ("lmk", "relative_error"), ("prob", "top1")]
    assert all(c["why"] for c in out["metric"])
    code, out = _dry_run(model, "--calib", str(d / "calib.npz"), "--metric", "box=top1")
    assert code == 0 and out["metric"][0]["kind"] == "top1" and "asked" in out["metric"][0]["why"]


def test_labels_find_their_output_and_metric_output_through_the_cli(face_stage):
    model, d = face_stage
    code, out = _dry_run(model, "--calib", str(d / "calib.npz"), "--eval", str(d / "eval.npz"))
    assert code == 0, out
    assert [(c["output"], c["kind"]) for c in out["metric"]] == [("prob", "top1")]
    code, out = _dry_run(model, "--calib", str(d / "calib.npz"), "--metric-output", "lmk", "--metric", "cosine")
    assert code == 0, out
    assert [(c["output"], c["kind"]) for c in out["metric"]] == [("lmk", "cosine")]
    code, out = _dry_run(model, "--calib", str(d / "calib.npz"), "--metric-output", "lmkk")
    assert code == 2 and "did you mean 'lmk'" in out
    code, out = _dry_run(model, "--calib", str(d / "calib.npz"), "--metric", "prob=toop1")
    assert code == 2 and "did you mean 'top1'" in out


def test_unknown_metric_output_is_refused_before_any_work_without_data(face_stage):
    model, _ = face_stage
    code, out = _dry_run(model, "--metric-output", "probb")  # no data: the graph's outputs are checked
    assert code == 2 and "no output 'probb'" in out and "did you mean 'prob'" in out


def test_regression_and_ordered_bin_metrics_give_per_sample_rows_so_the_bound_is_a_bootstrap():
    """Box regressions and a pitch distribution side by side (a detector stage and an ordered-bin head): each part
    gives per-sample rows whose aggregate is its score, so the multi-output metric has them too and the drop is
    judged by its bootstrap limit, not by random halves."""
    from edgeopt.metrics.confidence import drop_upper

    rng = np.random.default_rng(0)
    n, bins = 60, 64
    centre = rng.integers(8, bins - 8, n)
    dist = np.exp(-0.5 * ((np.arange(bins)[None, :] - centre[:, None]) / 2.0) ** 2)
    dist = (dist / dist.sum(1, keepdims=True)).astype(np.float32)
    box = rng.standard_normal((n, 4)).astype(np.float32)
    ref = [{"box": box[i:i + 1], "pitch": dist[i:i + 1]} for i in range(n)]
    spec = MetricSpec(kinds={"box": "relative_error", "pitch": "ordered_bins"})
    m = metric_for_outputs(ref, None, spec)
    assert {p.kind for p in m.parts} == {MetricName.RELATIVE_ERROR, MetricName.ORDERED_BINS}
    assert all(p.per_sample is not None for p in m.parts) and m.per_sample is not None
    noisy = [{"box": o["box"] + 0.05 * rng.standard_normal((1, 4)).astype(np.float32),
              "pitch": np.roll(o["pitch"], 3 if i % 10 == 0 else 0, axis=1)} for i, o in enumerate(ref)]
    for p in m.parts:
        digests = [p.digest(o) for o in noisy]
        assert p.aggregate(p.per_sample(digests)) == pytest.approx(p.score_digests(digests))
    digests = [m.digest(o) for o in noisy]
    drop = m.fp32_value - m.score_digests(digests)
    assert drop > 0 and drop_upper(m, digests, 0.9) > drop  # a limit above the point drop: the bootstrap ran


def test_a_detectors_per_anchor_regressions_are_judged_where_its_scores_are_confident():
    """Boxes per anchor [P,16] beside per-anchor logits [P,1] (BlazeFace's two heads, names that say nothing): the
    boxes are a regression judged only on the anchors FP32 calls a face. Noise on the background's boxes (which no
    decoder reads) costs nothing; the same noise on the confident anchors does. Before, the boxes were judged by an
    argmax over the 16 coordinates of every anchor."""
    rng = np.random.default_rng(1)
    n, p = 40, 64
    logits = np.full((n, p, 1), -8.0, np.float32)
    for i in range(n):
        logits[i, rng.integers(0, p, 3), 0] = 4.0  # three confident anchors a sample
    boxes = rng.standard_normal((n, p, 16)).astype(np.float32) * 30
    ref = [{"Identity": boxes[i:i + 1], "Identity_1": logits[i:i + 1]} for i in range(n)]
    m = metric_for_outputs(ref, None, MetricSpec())
    box = next(q for q in m.parts if q.output == "Identity")
    assert box.kind == MetricName.RELATIVE_ERROR and "detector's regressions" in box.why
    assert "where FP32's 'Identity_1' is confident" in box.description
    background = logits[..., 0] < 0

    def with_noise(where):
        noise = rng.standard_normal(boxes.shape).astype(np.float32) * 10 * where[..., None]
        return [{"Identity": (boxes + noise)[i:i + 1], "Identity_1": logits[i:i + 1]} for i in range(n)]

    assert box.fp32_value - box.score_outputs(with_noise(background)) == pytest.approx(0.0)
    assert box.fp32_value - box.score_outputs(with_noise(~background)) > 5.0


def test_landmarks_beside_a_presence_flag_are_a_regression_and_the_flag_a_decision():
    """A hand-landmark model's four heads with names that say nothing: 21 3-D points [N,63] (pixels), a hand-present
    probability [N,1], a handedness probability [N,1] and world points [N,63]. The points are a regression beside
    the one-value flags; before, they were judged by the argmax over 63 coordinates, which noise of a pixel flips."""
    pts = RNG.uniform(20, 200, (N, 63))
    world = RNG.normal(0, 0.05, (N, 63))
    flag, hand = RNG.uniform(0.6, 1.0, (N, 1)), RNG.uniform(0, 1, (N, 1))
    m = metric_for_outputs(_outs(Identity=pts, Identity_1=flag, Identity_2=hand, Identity_3=world), None)
    kinds = {p.output: p.kind for p in m.parts}
    assert kinds == {"Identity": MetricName.RELATIVE_ERROR, "Identity_1": MetricName.TOP1,
                     "Identity_2": MetricName.TOP1, "Identity_3": MetricName.RELATIVE_ERROR}
    assert "beside the class output 'Identity_1'" in m.parts[0].why
    assert "one decision value per sample" in m.parts[1].why and m.parts[1].name == "decision_at_0.5_agreement_with_fp32"
    noisy = _outs(Identity=pts + RNG.normal(0, 0.5, pts.shape), Identity_1=flag, Identity_2=hand,
                  Identity_3=world + RNG.normal(0, 1e-4, world.shape))
    assert m.drop(m.score_outputs(noisy)) < 1.0


def test_a_one_value_logit_of_any_rank_is_a_decision_at_zero_not_an_embedding():
    """A face mesh's face-present logit [N,1,1,1]: one value per sample is a decision (a logit decides at 0),
    never a cosine 'embedding' of one value; --metric-threshold still sets it."""
    logit = RNG.normal(0, 3, (N, 1, 1, 1))
    m = metric_for_outputs(_outs(conv2d_31=logit), None)
    assert m.kind == MetricName.TOP1 and m.name == "decision_at_0_agreement_with_fp32"
    flipped = logit.copy()
    flipped[:4] = -flipped[:4]  # four decisions change sign
    assert m.score_outputs(_outs(conv2d_31=flipped)) == pytest.approx(100 * (N - 4) / N)
    asked = metric_for_outputs(_outs(conv2d_31=logit), None, parse_metric_spec(threshold=1.0))
    assert asked.name == "decision_at_1_agreement_with_fp32"


def test_maps_in_unit_range_beside_maps_are_maps_not_a_detectors_regression():
    """A transcriber's three sigmoid maps over the same frames: notes [T,88], onsets [T,88] and a pitch contour
    [T,264]. The contour is a map judged where FP32 is confident, not a detector's regression (its values are in
    [0, 1] like its siblings')."""
    notes, onsets = RNG.uniform(0, 1, (N, 40, 88)) ** 4, RNG.uniform(0, 1, (N, 40, 88)) ** 6
    contour = RNG.uniform(0, 1, (N, 40, 264)) ** 4
    m = metric_for_outputs(_outs(out0=contour, out1=onsets, out2=notes), None)
    assert {p.output: p.kind for p in m.parts} == {"out0": MetricName.MAP_IOU, "out1": MetricName.MAP_IOU,
                                                   "out2": MetricName.MAP_IOU}


def test_a_decision_among_regressions_floors_the_worst_of_limit_at_its_exact_limit():
    """Landmarks beside a presence flag on 35 samples: a candidate that moves the points a little and flips no
    decision has a worst-of bootstrap limit near 0, but 35 unchanged decisions can't show that the next samples'
    won't flip: the flag's exact limit (3.88 points at 0.75) is the floor, as for a classifier judged alone. A
    flipped decision raises it further."""
    from edgeopt.metrics.confidence import counted_samples, drop_upper, paired_upper

    n = 35
    rng = np.random.default_rng(3)
    pts, flag = rng.uniform(20, 200, (n, 63)), rng.uniform(0.6, 1.0, (n, 1))
    outs = [{"Identity": pts[i:i + 1].astype(np.float32), "Identity_1": flag[i:i + 1].astype(np.float32)}
            for i in range(n)]
    m = metric_for_outputs(outs, None)
    assert m.kind == MetricName.ALL_OUTPUTS and counted_samples(m)
    moved = [{"Identity": o["Identity"] + 0.01, "Identity_1": o["Identity_1"]} for o in outs]
    upper = drop_upper(m, [m.digest(o) for o in moved], 0.75)
    assert upper == pytest.approx(paired_upper(0, 0, n, 0.75), abs=1e-3) and upper > 3.8
    flipped = [{"Identity": o["Identity"], "Identity_1": o["Identity_1"] * (0.1 if i == 0 else 1.0)}
               for i, o in enumerate(outs)]
    assert drop_upper(m, [m.digest(o) for o in flipped], 0.75) >= paired_upper(1, 0, n, 0.75) - 1e-3 > upper


def _heatmaps(peaks_yx, side=32, sigma=1.5, background=None):
    """[N,side,side,K] Gaussian heatmaps in [0, 1] with each map's peak at ``peaks_yx`` [N,K,2]; ``background``
    [N,K] bools: maps with no keypoint (a low, flat bump)."""
    n, k = peaks_yx.shape[:2]
    gy, gx = np.mgrid[0:side, 0:side]
    d2 = (gy[None, None] - peaks_yx[..., 0, None, None]) ** 2 + (gx[None, None] - peaks_yx[..., 1, None, None]) ** 2
    maps = np.exp(-d2 / (2 * sigma ** 2))
    if background is not None:
        maps = np.where(background[..., None, None], 0.2 * maps, maps)
    return np.moveaxis(maps, 1, -1)


def test_keypoint_heatmaps_judged_by_each_confident_maps_peak():
    """A pose model's heatmaps [N,H,W,K], one map per keypoint, with nothing in their name: each map is one compact
    peak, so they are keypoints, judged by where each peak is (within 1/32 of the side, one cell of 32), not by an
    argmax over the K maps at every position (a segmentation's reading); maps with no confident peak are
    background and not judged."""
    peaks = RNG.uniform(4, 28, (N, 5, 2))
    background = np.zeros((N, 5), bool)
    background[:, 4] = True  # the fifth keypoint is never in view
    m = metric_for_outputs(_outs(out=_heatmaps(peaks, background=background)), None)
    assert m.kind == MetricName.HEATMAP_PEAKS and "compact peak" in m.why
    assert m.name == "peak_within_1_cells_vs_fp32" and "over 0.5" in m.description
    assert m.score_outputs(_outs(out=_heatmaps(peaks + 0.4, background=background))) == 100.0
    moved = peaks.copy()
    moved[:, 0] += 4.0  # the first keypoint moves 4 cells on every sample
    assert m.score_outputs(_outs(out=_heatmaps(moved, background=background))) == pytest.approx(75.0)
    moved = peaks.copy()
    moved[:, 4] += 6.0  # the unseen keypoint's faint bump moves: background, not judged
    assert m.score_outputs(_outs(out=_heatmaps(moved, background=background))) == 100.0


def test_diffuse_heatmap_logits_beside_their_keypoints_are_heatmaps_channels_first_by_name():
    """Heatmap logits on photos with no person are diffuse, no compact peak: they are told by the keypoint vector
    beside them (K maps, 5 values for each of K keypoints), as MediaPipe's pose model's [64,64,39] beside [195];
    [N,K,H,W] named so is read with the keypoints first."""
    logits = RNG.normal(-6, 2, (N, 24, 24, 6))
    pts, flag = RNG.uniform(0, 256, (N, 30)), RNG.uniform(0, 1, (N, 1))
    m = metric_for_outputs(_outs(Identity=pts, Identity_1=flag, Identity_3=logits), None)
    hm = next(p for p in m.parts if p.output == "Identity_3")
    assert hm.kind == MetricName.HEATMAP_PEAKS and "beside 'Identity', 5 values for each of 6 keypoints" in hm.why
    assert "logits" in hm.description
    chw = np.moveaxis(_heatmaps(RNG.uniform(4, 20, (N, 3, 2)), side=24), -1, 1)  # [N,3,24,24]
    named = metric_for_outputs(_outs(keypoint_heatmaps=chw), None)
    assert named.kind == MetricName.HEATMAP_PEAKS and "named like heatmaps: 3 maps" in named.why
    assert "3 maps of 24x24" in named.description


def test_segmentation_logits_with_regions_stay_a_segmentation():
    """Class logits over regions (each class a block of the map, not a peak) are a segmentation: position
    agreement, as before heatmaps were told apart."""
    seg = np.zeros((N, 4, 16, 16))
    for i in range(N):
        cut = RNG.integers(4, 12)
        seg[i, 0, :cut], seg[i, 1, cut:, :8], seg[i, 2, cut:, 8:] = 5.0, 5.0, 5.0
    seg += RNG.normal(0, 0.5, seg.shape)
    assert metric_for_outputs(_outs(seg=seg), None).kind == MetricName.POSITION_AGREEMENT
