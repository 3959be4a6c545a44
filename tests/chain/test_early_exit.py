"""Early exits added to a trained classifier (``--early-exit auto``): cut points, the risk-controlled thresholds,
the staged artifact through ONNX Runtime, OpenVINO and TFLite (float and INT8), the plain model when no exit pays,
and refusals."""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import pytest
from fixtures_cascade import timings_by_node_count

from edgeopt.converters.early_exit.cuts import cut_candidates
from edgeopt.converters.early_exit.thresholds import (
    ExitScores,
    best_cascade,
    choose_thresholds,
    clopper_pearson_upper,
    judge,
)

MNIST = ("fixtures/models/mnist_cnn.onnx", "fixtures/data/mnist_calib.npz", "fixtures/data/mnist_test.npz")
DIGITS = ("fixtures/models/digits_cnn.onnx", "fixtures/data/digits_calib.npz", "fixtures/data/digits_test.npz")
# small counts: heads trained for few steps, each model timed a few runs; the speed test is skipped by asking no
# gain (min_gain -9: any cascade is kept) where the staged artifact itself is under test
FAST = ["--set", "early_exit.epochs=80", "--set", "early_exit.timing_runs=3"]


def test_cuts_sit_at_block_ends_never_inside_a_block(repo):
    proto = onnx.load(str(repo / DIGITS[0]))
    cuts = cut_candidates(proto)
    producers = {o: n.op_type for n in proto.graph.node for o in n.output}
    assert cuts and all(producers[c] not in ("Conv",) for c in cuts)  # a conv's output feeds its norm/activation


def test_clopper_pearson_upper_bound():
    assert clopper_pearson_upper(0, 100, 0.95) == pytest.approx(1 - 0.05 ** (1 / 100), abs=1e-6)
    assert clopper_pearson_upper(5, 100, 0.95) > 0.05
    assert clopper_pearson_upper(100, 100, 0.95) == 1.0


def _scores(n=2000, seed=0) -> ExitScores:
    rng = np.random.default_rng(seed)
    full = rng.integers(0, 4, n)
    conf = rng.uniform(0.25, 1.0, n)
    wrong = rng.uniform(size=n) > conf  # a confident exit is right more often
    pred = np.where(wrong, (full + 1) % 4, full)
    return ExitScores([conf], [pred], full, full.copy())


def test_thresholds_hold_the_bound_on_held_back_data():
    s = _scores()
    search, held = np.arange(0, 2000, 2), np.arange(1, 2000, 2)
    th = choose_thresholds(s.subset(search), (0,), 0.5, 1.0, None)
    assert th[0] != math.inf
    on_held = judge(s.subset(held), th, 1.0, 2.0, None)
    assert on_held.drop <= 1.0 and on_held.disagreement <= 2.0 and on_held.exit_shares[0] > 0


def test_the_search_half_is_judged_by_what_the_held_back_judge_accepts():
    from edgeopt.converters.early_exit.thresholds import accepted_points
    from edgeopt.metrics.confidence import paired_upper

    # 300 held-back samples, 1 point at 0.75 confidence: the gate's judge lets one lost sample through, not two
    assert paired_upper(1, 0, 300, 0.75) <= 1.0 < paired_upper(2, 0, 300, 0.75)
    assert accepted_points(300, 1.0, 0.75) == pytest.approx(100.0 / 300)
    assert accepted_points(20, 1.0, 0.75) is None  # too few samples to accept any drop within 1 point
    accepted = {}
    for rule, held_n in (("gate", 300), ("edge", None)):  # the edge: the search half judged as if it were held back
        accepted[rule] = 0
        for seed in range(20):
            s = _scores(600, seed)
            s.labels = None
            search, held = np.arange(0, 600, 2), np.arange(1, 600, 2)
            th = choose_thresholds(s.subset(search), (0,), 1.0, 2.0, None, 0.75, held_n=held_n)
            on_held = judge(s.subset(held), th, 1.0, 2.0, None, 0.75)
            assert on_held.drop_upper == pytest.approx(
                paired_upper(round(on_held.drop * 3), 0, 300, 0.75))  # the convert gate's limit
            accepted[rule] += bool(th[0] != math.inf and on_held.holds)
    assert accepted["gate"] >= 14 and accepted["gate"] > accepted["edge"]  # about the run's confidence: 0.75


def test_exit_confidence_is_stricter_than_the_count():
    s = _scores()
    counted = choose_thresholds(s, (0,), 1.0, 1.0, None)
    bounded = choose_thresholds(s, (0,), 1.0, 1.0, 0.95)
    assert bounded[0] >= counted[0]
    assert judge(s, bounded, 1.0, 1.0, 0.95).disagreement_bound <= 1.0


def test_an_exit_few_samples_take_is_left_out_when_each_exit_is_charged_its_call():
    n = 1000
    full = np.arange(n) % 4
    first = np.where(np.arange(n) < 800, 1.0, 0.3)  # 80 % leave at the first exit, all right
    second = np.where((np.arange(n) >= 800) & (np.arange(n) < 810), 1.0, 0.3)  # 1 % more at the second
    wrong = (full + 1) % 4
    s = ExitScores([first, second], [np.where(first > 0.5, full, wrong), np.where(second > 0.5, full, wrong)],
                   full, None)
    free = best_cascade(s, [1.0, 1.0, 1.0], [0.0, 0.0], 1.0, 2.0, None)
    charged = best_cascade(s, [1.0, 1.0, 1.0], [0.0, 0.0], 1.0, 2.0, None, exit_cost_ms=0.09)
    assert free["enabled"] == (0, 1) and charged["enabled"] == (0,)
    assert charged["mean_ms"] == pytest.approx(0.8 * 1.0 + 0.2 * 3.0)  # the prediction itself is not charged


def _bins(peaks, n_bins=60, width=2.0):
    """Rows of sigmoid-like activations over ordered bins, one smooth peak each (a pitch estimator's output)."""
    cols = np.arange(n_bins)[None, :]
    return np.exp(-0.5 * ((cols - np.asarray(peaks, np.float64)[:, None]) / width) ** 2)


def test_ordered_bins_exits_are_judged_by_peak_position_not_the_exact_bin():
    from edgeopt.converters.early_exit.answers import answers
    from edgeopt.metrics.base import MetricName

    rng = np.random.default_rng(0)
    full_peaks = rng.integers(10, 50, 400)
    exit_peaks = full_peaks + rng.choice([-1, 0, 1], 400)  # one 20-cent bin off: the pitch holds
    conf = rng.uniform(0.5, 1.0, 400)
    by_bins = ExitScores([conf], [answers(MetricName.ORDERED_BINS, _bins(exit_peaks))],
                         answers(MetricName.ORDERED_BINS, _bins(full_peaks)), None, MetricName.ORDERED_BINS)
    by_class = ExitScores([conf], [answers(MetricName.TOP1, _bins(exit_peaks))],
                          answers(MetricName.TOP1, _bins(full_peaks)), None, MetricName.TOP1)
    assert judge(by_bins, [0.0], 1.0, 2.0, None).holds  # every sample leaves, every position within 2 bins
    assert not judge(by_class, [0.0], 1.0, 2.0, None).holds  # a third change their exact bin
    assert choose_thresholds(by_bins, (0,), 1.0, 2.0, None)[0] == pytest.approx(conf.min())
    far = ExitScores([conf], [answers(MetricName.ORDERED_BINS, _bins(full_peaks + 3))], by_bins.full, None,
                     MetricName.ORDERED_BINS)
    assert judge(far, [0.0], 1.0, 2.0, None).disagreement == 100.0  # 3 bins (60 cents) off: the pitch is wrong


def test_sigmoid_bins_teach_the_heads_their_normalised_rows():
    from edgeopt.converters.early_exit.heads import as_probabilities

    rows = _bins([20, 30])
    teacher, is_prob = as_probabilities(rows)
    assert is_prob and np.allclose(teacher.sum(axis=1), 1.0)
    assert teacher.max() > 0.1  # a softmax of values in [0, 1] would be nearly flat (< 3/60 at its peak)
    _, logits_prob = as_probabilities(np.array([[2.0, -1.0, 0.5]]))
    assert not logits_prob


def test_the_exit_metric_is_the_runs_metric_where_an_exit_can_be_judged_by_it():
    from edgeopt.converters.early_exit.answers import exit_metric
    from edgeopt.metrics.base import MetricName, MetricSpec

    rows = _bins(np.linspace(10, 50, 40), n_bins=60)
    assert exit_metric(MetricSpec(name=MetricName.ORDERED_BINS), "y", rows, None) == MetricName.ORDERED_BINS
    assert exit_metric(MetricSpec(kinds={"y": MetricName.ORDERED_BINS}), "y", rows, None) == MetricName.ORDERED_BINS
    assert exit_metric(None, "y", rows, None) == MetricName.ORDERED_BINS  # chosen from what the output means
    assert exit_metric(MetricSpec(name=MetricName.COSINE), "y", rows, None) == MetricName.TOP1
    logits = np.random.default_rng(0).normal(size=(40, 10)).astype(np.float32)
    assert exit_metric(None, "y", logits, np.arange(40) % 10) == MetricName.TOP1


def _map_model(path):
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 1, 3, 3), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "map", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), str(path))


@pytest.mark.onnxruntime
def test_a_model_without_a_class_output_is_refused_with_exit_3(cli, tmp_path):
    _map_model(tmp_path / "map.onnx")
    np.savez(tmp_path / "d.npz", x=np.zeros((30, 1, 8, 8), np.float32))
    r = cli("convert", str(tmp_path / "map.onnx"), "--profile", "host", "--backend", "onnxruntime", "--early-exit",
            "auto", "--calib", str(tmp_path / "d.npz"), "--eval", str(tmp_path / "d.npz"), "-o", str(tmp_path / "a"))
    assert r.returncode == 3, r.stderr
    assert "class-score output" in r.stderr and len(r.stderr.strip().splitlines()) <= 2
    assert not (tmp_path / "a").exists()


def _convert(cli_in_process, monkeypatch, repo, tmp_path, files, backend, *extra, profile="host"):
    """A convert with exits and no gain asked (any cascade is kept), its subset chosen by node counts, not by
    timings of a loaded machine; the backend's own measurement still runs and is recorded."""
    timings_by_node_count(monkeypatch)
    model, calib, ev = (str(repo / f) for f in files)
    out = tmp_path / backend
    r = cli_in_process("convert", model, "--profile", profile, "--backend", backend, "--precision", "fp32",
                       "--early-exit", "auto", "--calib", calib, "--eval", ev, "--max-accuracy-drop", "2", *FAST,
                       "--set", "early_exit.min_gain=-1000", *extra, "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    report = next(s["report"] for s in manifest["stages"] if s["name"] == "early_exit")
    return out, manifest, report


def _check_staged(out, manifest, report, repo, bound=2.0, files=MNIST):
    from edgeopt.runtime.runners import open_runner

    assert report["verdict"]["early_exit"] is True, (report["verdict"], report.get("held_back"),
                                                     report.get("held_back_as_written"), report.get("measured"))
    assert report["held_back"]["holds"] and report["held_back"]["drop_points"] <= bound
    cascade = json.loads((out / "cascade.json").read_text())
    assert len(cascade["stages"]) == report["verdict"]["exits"] + 1
    assert all((out / s["dir"]).is_dir() for s in cascade["stages"]) and (out / "load.py").is_file()
    plain = cascade["plain"]  # the model without exits, by the same backend: what bench times the cascade against
    assert (out / plain["dir"] / plain["runtime"]["model"]).is_file()
    assert plain["runtime"]["backend"] == report["measured"]["backend"]
    assert manifest["validation"]["accuracy_drop"] <= bound
    consumer = manifest["consumer_check"]  # load.py ran the cascade as edgeopt's runner did, exit stages included
    assert consumer["skipped"] is None and consumer["passed"] is True and consumer["files"] == ["load.py"]
    data = np.load(repo / files[2])
    with open_runner(str(out)) as runner:
        ys = [runner.run({"input": data["input"][i:i + 1]})["logits"] for i in range(32)]  # the model's batch: 1
        assert all(y.shape == (1, 10) for y in ys) and sum(runner.exit_counts) == 32
        assert sum(runner.exit_counts[:-1]) > 0  # some samples left early


@pytest.mark.slow
@pytest.mark.onnxruntime
def test_staged_artifact_through_onnxruntime(cli, cli_in_process, monkeypatch, repo, tmp_path):
    pytest.importorskip("torch")
    out, manifest, report = _convert(cli_in_process, monkeypatch, repo, tmp_path, MNIST, "onnxruntime")
    _check_staged(out, manifest, report, repo)
    assert report["measured"]["backend"] == "onnxruntime" and report["measured"]["samples"] > 0  # really timed
    small = tmp_path / "in.npz"
    np.savez(small, input=np.load(repo / MNIST[2])["input"][:40])
    r = cli("bench", str(out), "--inputs", str(small), "--runs", "5", "--min-seconds", "0", "--no-store", "--json")
    assert r.returncode == 0, r.stderr
    figures = json.loads(r.stdout)["rows"][0]["early_exit"]
    assert figures["samples"] == 40 and figures["mean_ms"] > 0 and figures["worst_case_ms"] > 0
    assert sum(e["share"] for e in figures["exits"]) == pytest.approx(1.0)
    assert len(figures["exits"]) == report["verdict"]["exits"] + 1
    # the plain model kept in plain/ timed over the same samples in the same process, as convert timed it
    assert figures["plain_mean_ms"] > 0 and "plain/" in figures["plain_timed_with"]
    assert figures["mean_vs_plain"] == pytest.approx(figures["mean_ms"] / figures["plain_mean_ms"], abs=2e-3)
    assert not any("no plain/" in w for w in figures.get("warnings", []))
    human = cli("bench", str(out), "--inputs", str(small), "--runs", "5", "--min-seconds", "0", "--no-store")
    assert human.returncode == 0, human.stderr
    assert f"early exit over 40 samples of {small.name}" in human.stdout and "the plain model" in human.stdout
    _load_py_runs(out, small, 40)


def _load_py_runs(out, inputs, n):
    """The artifact's load.py (the cascade part and the backend's own loader for each stage) runs with python
    alone: each sample's answer and the stage it left at."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-I", str(out / "load.py"), "--inputs", str(inputs), "--outputs",
                        str(out.parent / "load_out.npz")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    got = np.load(out.parent / "load_out.npz")
    assert got["logits"].shape == (n, 10) and got["exit_stage"].shape == (n,)  # a batch of n: one sample a call
    assert set(got["exit_stage"].ravel().tolist()) <= set(range(len(json.loads((out / "cascade.json").read_text())
                                                                    ["stages"])))


@pytest.mark.slow
@pytest.mark.openvino
def test_staged_artifact_through_openvino(cli_in_process, monkeypatch, repo, tmp_path):
    pytest.importorskip("torch")
    out, manifest, report = _convert(cli_in_process, monkeypatch, repo, tmp_path, MNIST, "openvino")
    _check_staged(out, manifest, report, repo)
    assert all((out / f"stage{i}" / "model.xml").is_file() for i in range(report["verdict"]["exits"] + 1))
    small = tmp_path / "in.npz"
    np.savez(small, input=np.load(repo / MNIST[2])["input"][:8])
    _load_py_runs(out, small, 8)


@pytest.mark.slow
@pytest.mark.tflite
def test_staged_artifact_through_tflite_for_pi5(cli_in_process, monkeypatch, repo, tmp_path):
    pytest.importorskip("torch")
    out, manifest, report = _convert(cli_in_process, monkeypatch, repo, tmp_path, MNIST, "tflite", profile="pi5")
    _check_staged(out, manifest, report, repo)
    assert all((out / f"stage{i}" / "model.tflite").is_file() for i in range(report["verdict"]["exits"] + 1))
    small = tmp_path / "in.npz"
    np.savez(small, input=np.load(repo / MNIST[2])["input"][:8])
    _load_py_runs(out, small, 8)  # LiteRT's interpreter opens each stage, the NHWC stage tensors mapped back


@pytest.mark.slow
@pytest.mark.parametrize("profile, backend", [
    pytest.param("jetson-orin-nano", "onnxruntime", marks=pytest.mark.onnxruntime),
    pytest.param("intel-npu", "openvino", marks=pytest.mark.openvino)])
def test_staged_artifact_through_the_accelerator_profiles_default_backend(cli_in_process, monkeypatch, repo, tmp_path,
                                                                          profile, backend):
    """The Jetson and Intel NPU profiles' default backends: each stage carries the profile's runtime settings (the
    TensorRT provider with its fallbacks; the NPU device, CPU where there is none) and load.py runs the cascade as
    the runner does."""
    pytest.importorskip("torch")
    out, manifest, report = _convert(cli_in_process, monkeypatch, repo, tmp_path, MNIST, backend, profile=profile)
    _check_staged(out, manifest, report, repo)
    stages = json.loads((out / "cascade.json").read_text())["stages"]
    settings = manifest["runtime"]["settings"]
    assert all(s["runtime"]["settings"] == settings for s in stages)  # every stage as the profile runs a model
    if profile == "intel-npu":
        assert settings["device"] == "NPU"
    else:
        assert settings["provider"] == "TensorrtExecutionProvider"


@pytest.mark.slow
@pytest.mark.onnxruntime
def test_no_exit_pays_and_the_plain_model_is_written_with_the_reason(cli_in_process, monkeypatch, repo, tmp_path):
    pytest.importorskip("torch")
    # asking a gain no cascade can give: whatever this CPU measures, no exit pays
    out, manifest, report = _convert(cli_in_process, monkeypatch, repo, tmp_path, DIGITS, "onnxruntime", "--set",
                                     "early_exit.min_gain=0.99")
    assert report["verdict"]["early_exit"] is False and report["verdict"]["why"]
    assert not (out / "cascade.json").exists() and (out / "model.onnx").is_file()
    assert any("plain model is written" in w for w in manifest["warnings"])


def _convert_in_process(cli_in_process, repo, tmp_path, backend, *extra):
    model, calib, ev = (str(repo / f) for f in MNIST)
    out = tmp_path / backend
    r = cli_in_process("convert", model, "--profile", "host", "--backend", backend, "--early-exit", "auto",
                       "--calib", calib, "--eval", ev, "--max-accuracy-drop", "2", *FAST, *extra, "-o", str(out),
                       "--json")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    return out, manifest, next(s["report"] for s in manifest["stages"] if s["name"] == "early_exit")


@pytest.mark.slow
@pytest.mark.openvino
def test_the_backends_measurement_decides_and_the_plain_model_is_the_backends(cli_in_process, repo, tmp_path,
                                                                              monkeypatch):
    pytest.importorskip("torch")
    timings_by_node_count(monkeypatch, ratio=1.3)  # predicted to pay, measured not to in OpenVINO
    out, manifest, report = _convert_in_process(cli_in_process, repo, tmp_path, "openvino", "--precision", "fp32")
    assert report["measured"]["backend"] == "openvino" and report["verdict"]["early_exit"] is False
    assert "openvino" in report["verdict"]["why"] and "don't pay once run" in report["verdict"]["why"]
    assert not (out / "cascade.json").exists() and not (out / "stage0").exists()
    assert (out / "model.xml").is_file() and manifest["runtime"]["backend"] == "openvino"
    from edgeopt.runtime.runners import open_runner

    with open_runner(str(out)) as runner:
        assert runner.run({"input": np.load(repo / MNIST[2])["input"][:1]})["logits"].shape == (1, 10)


@pytest.mark.slow
@pytest.mark.openvino
def test_openvino_int8_stages_each_calibrated_on_their_own_inputs(cli_in_process, repo, tmp_path, monkeypatch):
    pytest.importorskip("torch")
    pytest.importorskip("nncf")
    timings_by_node_count(monkeypatch, ratio=0.5)
    # thresholds are chosen on the float stages; the INT8 stages move the confidences: a wider bound than float's
    out, manifest, report = _convert_in_process(cli_in_process, repo, tmp_path, "openvino", "--precision", "int8",
                                                "--max-accuracy-drop", "5")
    _check_staged(out, manifest, report, repo, bound=5.0)
    assert report["held_back_as_written"]["holds"]
    assert report["measured"]["backend"] == "openvino" and "openvino" in report["verdict"]["why"]
    assert report["stage_int8"]["mode"] == "static"
    for i in range(report["verdict"]["exits"] + 1):
        assert "FakeQuantize" in (out / f"stage{i}" / "model.xml").read_text()  # each stage holds INT8 ops


@pytest.mark.slow
@pytest.mark.tflite
def test_tflite_int8_stages_each_calibrated_on_their_own_inputs_for_pi5(cli_in_process, monkeypatch, repo, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("ai_edge_quantizer")
    from edgeopt.converters.backends.tflite.ops import op_counts

    timings_by_node_count(monkeypatch)
    model, calib, ev = (str(repo / f) for f in DIGITS)
    out = tmp_path / "pi5"
    # pi5's default path (TFLite INT8); the bound as the OpenVINO INT8 stages have it: INT8 moves the confidences
    r = cli_in_process("convert", model, "--profile", "pi5", "--precision", "int8", "--early-exit", "auto",
                       "--calib", calib, "--eval", ev, "--max-accuracy-drop", "5", *FAST,
                       "--set", "early_exit.min_gain=-1000", "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    report = next(s["report"] for s in manifest["stages"] if s["name"] == "early_exit")
    _check_staged(out, manifest, report, repo, bound=5.0, files=DIGITS)
    assert report["held_back_as_written"]["holds"] and report["measured"]["backend"] == "tflite"
    assert report["stage_int8"]["mode"] == "static" and report["search_aim"] == 0.5
    for i in range(report["verdict"]["exits"] + 1):  # each stage holds INT8 ops, none left float
        counts = op_counts(out / f"stage{i}" / "model.tflite")
        assert counts["quantized_ops"] > 0 and counts["float_ops"] == 0, (i, counts)


@pytest.mark.slow
@pytest.mark.tvm
def test_tvm_int8_stages_are_cut_from_the_chains_qdq_model(cli_in_process, monkeypatch, repo, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("tvm")
    timings_by_node_count(monkeypatch)
    model, calib, ev = (str(repo / f) for f in DIGITS)
    out = tmp_path / "tvm"
    r = cli_in_process("convert", model, "--profile", "host", "--backend", "tvm", "--precision", "int8",
                       "--early-exit", "auto", "--calib", calib, "--eval", ev, "--max-accuracy-drop", "5", *FAST,
                       "--set", "early_exit.min_gain=-1000", "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    report = next(s["report"] for s in manifest["stages"] if s["name"] == "early_exit")
    _check_staged(out, manifest, report, repo, bound=5.0, files=DIGITS)
    assert report["measured"]["backend"] == "tvm" and report["costs_estimated"]  # no TVM timer: the cost model
    assert report["stage_int8"]["quantized"].startswith("before the cut")
    cascade = json.loads((out / "cascade.json").read_text())
    for s in cascade["stages"]:  # each stage compiled from its part of the QDQ graph
        assert any("quantize/dequantize" in n for n in s["runtime"]["notes"]), s["runtime"]["notes"]


def _fake_cascade(tmp_path, repo, source: str | None) -> str:
    """An early-exit artifact's records alone (analyze reads cascade.json and the manifest's source model)."""
    out = tmp_path / "ee"
    out.mkdir(parents=True)
    stages = [{"dir": f"stage{i}"} for i in range(3)]
    (out / "cascade.json").write_text(json.dumps({
        "format": 1, "output": "logits", "scores": "logits", "stages": stages, "exit_shares_at_convert": [0.6, 0.3, 0.1],
        "plain_ms_at_convert": 2.0, "stage_ms_at_convert": [0.5, 0.7, 1.2], "timed_with": "injected"}))
    (out / "manifest.json").write_text(json.dumps({"source_model": {"path": source}}))
    return str(out)


def test_analyze_predicts_the_mean_and_worst_case_from_the_exit_shares(cli_in_process, repo, tmp_path):
    art = _fake_cascade(tmp_path, repo, str(repo / MNIST[0]))
    r = cli_in_process("analyze", art, "--profile", "pi5", "--no-preflight", "--json")
    assert r.returncode == 0, r.stderr
    ee = json.loads(r.stdout)["early_exit"]
    assert ee["predicted_mean_ms"] == pytest.approx(0.6 * 0.5 + 0.3 * 1.2 + 0.1 * 2.4)
    assert ee["worst_case_ms"] == pytest.approx(2.4) and ee["worst_case_vs_plain"] == pytest.approx(1.2)
    dev = ee["on_profile"]
    assert dev["estimate"] is True and dev["mean_estimate_ms"] == pytest.approx(
        dev["plain_estimate_ms"] * ee["mean_vs_plain"], rel=1e-2)
    r = cli_in_process("analyze", _fake_cascade(tmp_path / "b", repo, None), "--profile", "pi5")
    assert r.returncode == 0 and "predicted mean 0.900 ms" in r.stdout and "worst case 2.400 ms" in r.stdout


def test_bench_compares_the_cascade_with_the_backends_plain_model_where_convert_measured_it():
    from edgeopt.bench.early_exit import _plain_at_convert

    onnx_only = {"plain_ms_at_convert": 2.0, "timed_with": "ONNX Runtime, 1 thread"}
    assert _plain_at_convert(onnx_only) == (2.0, "ONNX Runtime, 1 thread")
    measured = {**onnx_only, "measured_at_convert": {"plain_ms": 0.8, "timed_with": "tflite (the artifacts as written)"}}
    plain, how = _plain_at_convert(measured)
    assert plain == 0.8 and "tflite" in how


def _sigmoid_outputs(src, dst):
    """``src`` with its logits through a Sigmoid: independent activations in [0, 1], as a pitch model's bins."""
    from onnx import helper

    proto = onnx.load(str(src))
    out = proto.graph.output[0]
    proto.graph.node.append(helper.make_node("Sigmoid", [out.name], ["activation"]))
    out.name = "activation"
    onnx.save(proto, str(dst))


@pytest.mark.slow
@pytest.mark.onnxruntime
def test_exits_are_judged_by_the_runs_metric_end_to_end(cli_in_process, monkeypatch, repo, tmp_path):
    pytest.importorskip("torch")
    # plumbing, not a pitch model: the digits' classes are not ordered, so the bound is loose
    timings_by_node_count(monkeypatch)
    _sigmoid_outputs(repo / MNIST[0], tmp_path / "sig.onnx")
    out = tmp_path / "ee"
    r = cli_in_process("convert", str(tmp_path / "sig.onnx"), "--profile", "host", "--backend", "onnxruntime",
                       "--precision", "fp32", "--early-exit", "auto", "--metric", "ordered_bins", "--calib",
                       str(repo / MNIST[1]), "--eval", str(repo / MNIST[2]), "--max-accuracy-drop", "5", *FAST,
                       "--set", "early_exit.min_gain=-1000", "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    report = next(s["report"] for s in manifest["stages"] if s["name"] == "early_exit")
    assert report["judged_by"] == "ordered_bins", report
    assert report["verdict"]["early_exit"] is True, (report["verdict"], report["search"], report["held_back"])
    cascade = json.loads((out / "cascade.json").read_text())
    assert cascade["scores"] == "probabilities"  # sigmoid rows taught normalised: the exits answer with probabilities
    written = report["held_back_as_written"]
    assert written["samples"] > 0 and 0 <= written["agreement"] <= 100
    assert manifest["validation"]["metric_kind"] == "ordered_bins"
