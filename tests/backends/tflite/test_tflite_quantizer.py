"""TFLite INT8 with ai-edge-quantizer (float .tflite from onnx2tf, then per-op recipes), recurrent models,
integer inputs, and onnx2tf failures reported as what they are."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.tflite


def _json(proc) -> dict:
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(lines[0])


def _save(graph, path: Path, opset: int = 17) -> Path:
    import onnx
    from onnx import helper as h

    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def _tflite_report(out: Path) -> dict:
    m = json.loads((out / "manifest.json").read_text())
    return next(s for s in m["stages"] if s["name"] == "tflite")["report"]


# ----------------------------------------------------------------------------- fast: no conversion


def _stacked_states_model(path: Path) -> Path:
    """Three [1,1,4] 'final states' concatenated on axis 0, then the last one picked (as torch exports h[-1])."""
    from onnx import TensorProto as T
    from onnx import helper as h

    nodes = [h.make_node("Relu", [f"x{i}"], [f"h{i}"]) for i in range(3)]
    nodes += [h.make_node("Concat", ["h0", "h1", "h2"], ["hs"], axis=0),
              h.make_node("Constant", [], ["last"], value=h.make_tensor("v", T.INT64, [], [-1])),
              h.make_node("Gather", ["hs", "last"], ["y"], axis=0)]
    graph = h.make_graph(nodes, "states", [h.make_tensor_value_info(f"x{i}", T.FLOAT, [1, 1, 4]) for i in range(3)],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 4])])
    return _save(graph, path)


def test_pick_from_concat_same_values_one_op_fewer(tmp_path):
    """Gather(Concat(states), -1) becomes Squeeze(last state): the output onnx2tf got wrong for a torch LSTM."""
    import onnx
    import onnxruntime as ort

    from edgeopt.converters.backends.tflite.convert import pick_from_concat

    path = _stacked_states_model(tmp_path / "m.onnx")
    model = onnx.load(str(path))
    assert pick_from_concat(model) == 1
    assert "Gather" not in [n.op_type for n in model.graph.node]
    onnx.checker.check_model(model)
    feed = {f"x{i}": np.random.default_rng(i).standard_normal((1, 1, 4)).astype(np.float32) for i in range(3)}
    before = ort.InferenceSession(str(path)).run(None, feed)[0]
    after = ort.InferenceSession(model.SerializeToString()).run(None, feed)[0]
    assert after.shape == (1, 4) and np.array_equal(before, after)


def test_crash_named_by_signal_not_by_printed_defaults(tmp_path):
    from edgeopt.converters.backends.tflite.convert import LOG_HINT, failure

    log = tmp_path / "onnx2tf.log"
    log.write_text("quant_norm_mean: np.asarray([[[[0.485, 0.456, 0.406]]]], dtype=np.float32)\n"
                   "quant_norm_std: np.asarray([[[[0.229, 0.224, 0.225]]]], dtype=np.float32)\n")
    err = failure(log, -11, {})
    assert "onnx2tf crashed (SIGSEGV, exit -11)" in err.message
    assert "quant_norm" not in err.one_line() and "0.485" not in err.one_line() and LOG_HINT in err.hint


def test_failure_without_op_type_names_the_node(tmp_path):
    from edgeopt.converters.backends.tflite.convert import failure

    log = tmp_path / "onnx2tf.log"
    log.write_text("ERROR: input_onnx_file_path: model.onnx\nERROR: onnx_op_name: wa/lstm/Expand\n"
                   "ValueError: Output tensors of a Functional model must be the output of a TensorFlow `Layer`\n")
    err = failure(log, 1, {})
    assert "node 'wa/lstm/Expand'" in err.message and "'?'" not in err.message and "ValueError" in err.message


def test_recipe_keeps_named_ops_float():
    from edgeopt.converters.backends.tflite.quantizer import TFLiteQuantizer
    from edgeopt.converters.quantize.modes import DynamicMode, StaticMode

    q = TFLiteQuantizer([])
    recipe = q.recipe(StaticMode(), ("model/dense_1/MatMul;",))
    kept = [r for r in recipe if r["algorithm_key"] == "no_quantize" and r["regex"] != ".*"]
    assert [r["regex"] for r in kept] == ["^model/dense_1/MatMul;$"]
    assert recipe[0]["op_config"]["activation_tensor_config"]["num_bits"] == 8
    assert "activation_tensor_config" not in q.recipe(DynamicMode())[0]["op_config"]


def test_onnx2tf_crash_cli_keeps_log_beside_output(tmp_path, cli):
    """A fake onnx2tf that prints its ImageNet defaults and dies of SIGSEGV: exit 3 naming the crash, the log
    kept at the path the message gives, nothing at the output."""
    from onnx import TensorProto as T
    from onnx import helper as h

    fake = tmp_path / "fake" / "onnx2tf"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "import os, signal, sys\n"
        "def main():\n"
        "    print('quant_norm_mean: np.asarray([[[[0.485, 0.456, 0.406]]]])', flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGSEGV)\n")
    model = _save(h.make_graph([h.make_node("Relu", ["x"], ["y"])], "r", [h.make_tensor_value_info("x", T.FLOAT, [1, 4])],
                               [h.make_tensor_value_info("y", T.FLOAT, [1, 4])]), tmp_path / "relu.onnx")
    out = tmp_path / "art"
    env = {"PYTHONPATH": os.pathsep.join([str(fake.parent), os.environ.get("PYTHONPATH", "")])}
    proc = cli("convert", str(model), "--profile", "pi5", "--backend", "tflite", "--precision", "fp32", "-o", str(out),
               "--json", env=env)
    assert proc.returncode == 3, proc.stderr[-2000:]
    err = _json(proc)["error"]
    assert "onnx2tf crashed (SIGSEGV, exit -11)" in err["message"] and "0.485" not in err["message"]
    kept = tmp_path / "art.onnx2tf.log"
    assert str(kept) in err["hint"] and "quant_norm_mean" in kept.read_text()
    assert not out.exists() and "Traceback" not in proc.stderr
    # without --backend the pi5 profile's next backend (ONNX Runtime for aarch64) builds it, saying why
    proc = cli("convert", str(model), "--profile", "pi5", "--precision", "fp32", "-o", str(out), "--json", env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "tflite could not hold this model" in proc.stderr and "trying onnxruntime" in proc.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["backend"] == "onnxruntime"
    assert [e["backend"] for e in manifest["backend_fallback"]] == ["tflite"]
    assert "onnx2tf crashed (SIGSEGV" in manifest["backend_fallback"][0]["reason"]


# ----------------------------------------------------------------------------- conversions (slow)


def _byte_classifier(path: Path) -> Path:
    """int32 byte ids [1,16] -> embedding (Gather) -> mean -> Gemm -> [1,4], like magika's input."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    inits = [nh.from_array(rng.standard_normal((257, 8)).astype(np.float32), "emb"),
             nh.from_array(np.array([1], np.int64), "axis1"),
             nh.from_array(rng.standard_normal((8, 4)).astype(np.float32), "w"),
             nh.from_array(rng.standard_normal(4).astype(np.float32), "b")]
    nodes = [h.make_node("Gather", ["emb", "bytes"], ["e"], axis=0),
             h.make_node("ReduceMean", ["e", "axis1"], ["m"], keepdims=0),
             h.make_node("Gemm", ["m", "w", "b"], ["logits"])]
    graph = h.make_graph(nodes, "bytes", [h.make_tensor_value_info("bytes", T.INT32, [1, 16])],
                         [h.make_tensor_value_info("logits", T.FLOAT, [1, 4])], initializer=inits)
    return _save(graph, path, opset=18)


@pytest.mark.slow
def test_integer_inputs_stay_integer_through_int8(tmp_path, cli):
    from ai_edge_litert.interpreter import Interpreter

    from edgeopt.runtime.runners import open_runner

    model = _byte_classifier(tmp_path / "bytes.onnx")
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "calib.npz", bytes=rng.integers(0, 257, (32, 16)).astype(np.int32))
    np.savez(tmp_path / "test.npz", bytes=rng.integers(0, 257, (40, 16)).astype(np.int32))
    out = tmp_path / "int8"
    proc = cli("convert", str(model), "--profile", "pi5", "--precision", "int8", "--calib", str(tmp_path / "calib.npz"),
               "--eval", str(tmp_path / "test.npz"), "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _json(proc)["precision"] == "int8"
    interp = Interpreter(model_path=str(out / "model.tflite"))
    assert interp.get_input_details()[0]["dtype"] == np.int32  # the byte ids stay integer
    report = _tflite_report(out)
    assert report["quantized_ops"] >= 1 and "ai-edge-quantizer" in report["method"]
    x = np.load(tmp_path / "test.npz")["bytes"][:1]
    with open_runner(str(out)) as runner:
        assert runner.run({"bytes": x})["logits"].shape == (1, 4)


def _torch_lstm(path: Path) -> Path:
    """A small speaker-encoder-like net (as resemblyzer's): 3 LSTM layers, h[-1] -> Linear -> ReLU -> L2 norm."""
    torch = pytest.importorskip("torch")
    from torch import nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm, self.linear = nn.LSTM(8, 16, 3, batch_first=True), nn.Linear(16, 12)

        def forward(self, x):
            _, (hidden, _) = self.lstm(x)
            e = torch.relu(self.linear(hidden[-1]))
            return e / (torch.norm(e, dim=1, keepdim=True) + 1e-5)

    torch.manual_seed(0)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Encoder().eval(), torch.randn(1, 20, 8), str(path), input_names=["mels"],
                          output_names=["embed"], opset_version=17, dynamo=False)
    return path


@pytest.mark.slow
def test_lstm_through_pi5_right_shape_and_int8(tmp_path, cli):
    """A torch-exported 3-layer LSTM: FP32 has ONNX's [1,12] output (not every layer's state), and INT8 is made
    (static INT8 can't calibrate LiteRT's WHILE loops: another mode, named in the report)."""
    import onnxruntime as ort

    from edgeopt.runtime.runners import open_runner

    model = _torch_lstm(tmp_path / "lstm.onnx")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((48, 20, 8)).astype(np.float32)
    np.savez(tmp_path / "calib.npz", mels=x[:16])
    np.savez(tmp_path / "test.npz", mels=x[16:])
    out = tmp_path / "fp32"
    proc = cli("convert", str(model), "--profile", "pi5", "--precision", "fp32", "--eval", str(tmp_path / "test.npz"),
               "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    ref = ort.InferenceSession(str(model)).run(None, {"mels": x[:1]})[0]
    with open_runner(str(out)) as runner:
        got = runner.run({"mels": x[:1]})["embed"]
    assert got.shape == ref.shape == (1, 12) and np.max(np.abs(got - ref)) < 1e-4
    out8 = tmp_path / "int8"
    proc = cli("convert", str(model), "--profile", "pi5", "--precision", "int8", "--calib", str(tmp_path / "calib.npz"),
               "--eval", str(tmp_path / "test.npz"), "--max-accuracy-drop", "5", "-o", str(out8), "--json")
    assert proc.returncode in (0, 5), proc.stderr[-3000:]
    if proc.returncode == 0:
        report = _tflite_report(out8)
        assert report["quantized_ops"] >= 1 and "static" not in report["method"]
        assert "static_failed" in report["accuracy_aware"]


@pytest.mark.slow
def test_wrong_output_shape_caught_naming_output(tmp_path, cli):
    """The .tflite's outputs are checked against ONNX's: a mismatch is one line naming the output and both shapes."""
    from types import SimpleNamespace

    from edgeopt.converters.backends.tflite.stage import check_output_shapes
    from edgeopt.errors import StageError

    model = _torch_lstm(tmp_path / "lstm.onnx")
    out = tmp_path / "fp32"
    proc = cli("convert", str(model), "--profile", "pi5", "--precision", "fp32", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_output_shapes(out / "model.tflite", [SimpleNamespace(name="embed", shape=[1, 12])])
    with pytest.raises(StageError) as err:
        check_output_shapes(out / "model.tflite", [SimpleNamespace(name="embed", shape=[3, 12])])
    assert "output 'embed' has shape [1, 12] in the .tflite but [3, 12] in the ONNX model" in err.value.message


def _one_fragile_layer(path: Path) -> Path:
    """x [1,32] -> Gemm -> Relu -> Gemm -> [1,10], classifying 10 well-separated clusters (input k -> hidden
    k+1 -> class k, a wide margin). Hidden unit 0 is dead (bias -1000), and the second layer's weights from it
    are 1000: FP32 never sees them, but any INT8 weight scale of that layer is set by them and rounds every
    other weight of it to 0. Only keeping that one op float holds the bound."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    w1 = (rng.standard_normal((32, 16)) * 0.01).astype(np.float32)
    w2 = (rng.standard_normal((16, 10)) * 0.01).astype(np.float32)
    for k in range(10):
        w1[k, k + 1] = w2[k + 1, k] = 1.0
    b1 = np.zeros(16, np.float32)
    b1[0] = -1000.0
    w2[0, :] = 1000.0
    inits = [nh.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (np.zeros(10, np.float32), "b2"))]
    nodes = [h.make_node("Gemm", ["x", "w1", "b1"], ["a"]), h.make_node("Relu", ["a"], ["r"]),
             h.make_node("Gemm", ["r", "w2", "b2"], ["logits"])]
    graph = h.make_graph(nodes, "fragile", [h.make_tensor_value_info("x", T.FLOAT, [1, 32])],
                         [h.make_tensor_value_info("logits", T.FLOAT, [1, 10])], initializer=inits)
    return _save(graph, path)


def _clusters(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, 32)) * 0.1).astype(np.float32)
    x[np.arange(n), rng.integers(0, 10, n)] += 4.0
    return x


@pytest.mark.slow
def test_search_keeps_one_op_float(tmp_path, cli):
    model = _one_fragile_layer(tmp_path / "fragile.onnx")
    np.savez(tmp_path / "calib.npz", x=_clusters(64, 1))
    np.savez(tmp_path / "test.npz", x=_clusters(200, 2))
    out = tmp_path / "int8"
    proc = cli("convert", str(model), "--profile", "pi5", "--precision", "int8", "--calib", str(tmp_path / "calib.npz"),
               "--eval", str(tmp_path / "test.npz"), "--max-accuracy-drop", "2", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = _tflite_report(out)
    aa = report["accuracy_aware"]
    assert all(t["search_drop_points"] > 2 for t in aa["tried"] if t["kept_in_float"] == 0)  # no mode alone holds
    assert len(report["kept_in_float"]) == 1 and report["float_ops"] >= 1 and report["quantized_ops"] >= 1
    assert aa["met"] and aa["confirm_drop_points"] <= 2


@pytest.mark.slow
def test_ranking_keeps_late_ops_last_and_ranks_weight_only_ops(tmp_path):
    """A ranking that runs out of time leaves the rest UNRANKED, after the ranked ones: an empty ranking ended
    the search as if no op could stay float, and the message then said "relax" where the budget was the limit
    (PP-OCRv4's recogniser on jetson-agx-orin, 97.8 % after the 4 modes, "0 ops kept in float")."""
    from edgeopt.converters.backends.tflite.convert import run_onnx2tf
    from edgeopt.converters.backends.tflite.quantizer import TFLiteQuantizer
    from edgeopt.converters.backends.tflite.search import rank_ops
    from edgeopt.converters.quantize.modes import DynamicMode, WeightsMode
    from edgeopt.converters.quantize.sensitivity import UNRANKED

    model = _one_fragile_layer(tmp_path / "fragile.onnx")
    flt = tmp_path / "float.tflite"
    run_onnx2tf(model, tmp_path / "o2t", tmp_path / "onnx2tf.log", tflite_out=flt)
    quantizer = TFLiteQuantizer([{"name": "x", "runtime_name": "x", "transpose": None}])
    made = quantizer.quantize(flt, DynamicMode(), tmp_path / "dyn.tflite")
    feeds = [{"x": _clusters(1, 3)}]
    ranked = rank_ops(flt, made.path, feeds, deadline=float("inf"))
    late = rank_ops(flt, made.path, feeds, deadline=0.0)
    assert len(ranked) == 2 and all(score != UNRANKED for _, score in ranked)
    assert sorted(late) == sorted((scope, UNRANKED) for scope, _ in ranked)
    # weight-only: the ops read DEQUANTIZE'd 8-bit weights and are ranked as well (PP-OCRv4's recogniser got an
    # empty ranking on its best mode, weight-only at 97.8 %, and the search ended with 32 of its 60 s unused)
    weights = quantizer.quantize(flt, WeightsMode(), tmp_path / "w8.tflite")
    assert {scope for scope, _ in rank_ops(flt, weights.path, feeds, float("inf"))} == {scope for scope, _ in ranked}


def test_cli_module_keeps_tensorflow_out():
    """The quantizer module and the search import no TensorFlow (ai-edge-quantizer needs none)."""
    import subprocess

    code = ("import sys; import edgeopt.converters.backends.tflite.quantizer, edgeopt.converters.backends.tflite.search\n"
            "assert 'tensorflow' not in sys.modules and 'ai_edge_quantizer' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_wrap_tflite_keeps_old_output_until_new_is_complete(tmp_path, monkeypatch):
    """The new artifact failing to move into place leaves the earlier one as it was (it used to be deleted
    before the rename)."""
    from edgeopt import wrapped_artifact
    from edgeopt.converters.backends.tflite import wrapped as tflite

    src = tmp_path / "m.tflite"
    src.write_bytes(b"not read: specs are faked")
    out = tmp_path / "art"
    out.mkdir()
    old = '{"edgeopt_version": "0.1.0"}'  # an earlier edgeopt output: the one kind publish may replace
    (out / "manifest.json").write_text(old)
    spec = {"name": "x", "shape": [1, 4], "dtype": "float32"}
    monkeypatch.setattr(tflite, "tflite_specs", lambda path: ([spec], [dict(spec, name="y")], "fp32"))
    real_replace = os.replace

    def failing_replace(a, b):
        if ".tmp-" in Path(a).name and Path(b) == out:
            raise OSError(28, "No space left on device")
        return real_replace(a, b)

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError):
        wrapped_artifact.wrap_model_file(src, out)
    assert (out / "manifest.json").read_text() == old and not list(tmp_path.glob("*.tmp-*"))
    monkeypatch.setattr(os, "replace", real_replace)
    wrapped_artifact.wrap_model_file(src, out)
    assert (out / "model.tflite").read_bytes() == src.read_bytes() and not list(tmp_path.glob("art.old-*"))


@pytest.mark.slow
def test_weight_only_tflite_counts_as_quantized_units(tmp_path):
    """The validation's unit count reads weight-only INT8 (8-bit constants through a DEQUANTIZE) as quantized, as
    the ONNX and OpenVINO counts do: it called such artifacts "the FP32 model" and failed their int8 gate (DBNet on
    rpi4 and the Jetsons, resemblyzer's LSTM on pi5 in the device matrix)."""
    from edgeopt.converters.backends.tflite.convert import run_onnx2tf
    from edgeopt.converters.backends.tflite.quantizer import TFLiteQuantizer
    from edgeopt.converters.quantize.modes import WeightsMode
    from edgeopt.quant_units import count_units

    model = _one_fragile_layer(tmp_path / "fragile.onnx")
    flt = tmp_path / "float.tflite"
    run_onnx2tf(model, tmp_path / "o2t", tmp_path / "onnx2tf.log", tflite_out=flt)
    weights = TFLiteQuantizer([{"name": "x", "runtime_name": "x", "transpose": None}]).quantize(
        flt, WeightsMode(), tmp_path / "w8.tflite")
    assert count_units(tmp_path, {"model": "float.tflite"}) == {"quantized": 0, "float": 2, "file": "float.tflite"}
    assert count_units(tmp_path, {"model": weights.path.name}) == {"quantized": 2, "float": 0,
                                                                   "file": weights.path.name}


def _shared_filter_model(path: Path) -> Path:
    """Two 3x3 convolutions that read one filter and one bias (as a constant-Q front end convolves each octave
    with one filter bank), then their sum."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 2, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    nodes = [h.make_node("Conv", ["x", "w", "b"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             h.make_node("Relu", ["x"], ["r"]),
             h.make_node("Conv", ["r", "w", "b"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             h.make_node("Add", ["c1", "c2"], ["y"])]
    graph = h.make_graph(nodes, "shared", [h.make_tensor_value_info("x", T.FLOAT, [1, 2, 8, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 4, 8, 8])], [w, b])
    return _save(graph, path)


@pytest.mark.parametrize("mode", ["weights", "static"])
def test_an_op_kept_float_that_shares_its_filter_with_a_quantized_one_builds(tmp_path, mode):
    """Keeping one of two convolutions that read the same filter in float made ai-edge-quantizer 0.10.0 fail
    ("can only concatenate str (not "bytes") to str", its dequant_insert on the duplicate it makes): Basic Pitch's
    every "k ops in float" candidate failed so. The quantized op now reads a copy of its own; the model builds,
    keeps that op float, quantizes the other, and computes what the float model computes, within INT8's error."""
    from ai_edge_litert.interpreter import Interpreter

    from edgeopt.converters.backends.tflite.convert import run_onnx2tf
    from edgeopt.converters.backends.tflite.ops import judged_ops, read_ops
    from edgeopt.converters.backends.tflite.quantizer import TFLiteQuantizer
    from edgeopt.converters.quantize.modes import StaticMode, WeightsMode
    from edgeopt.data import Dataset

    flt = tmp_path / "float.tflite"
    run_onnx2tf(_shared_filter_model(tmp_path / "shared.onnx"), tmp_path / "o2t", tmp_path / "o2t.log", tflite_out=flt)
    _, ops = read_ops(flt)
    convs = [o for o in ops if o["type"] == "CONV_2D"]
    assert len(convs) == 2 and convs[0]["inputs"][1] == convs[1]["inputs"][1]  # onnx2tf kept the one filter
    quantizer = TFLiteQuantizer(None)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((32, 1, 8, 8, 2)).astype(np.float32)  # onnx2tf's NHWC input, a batch of 1 a sample
    calib = Dataset({"x": x}, None, ranks={"x": 4})  # the signature's input name
    for kept in ([c["scope"] for c in convs[:1]], [c["scope"] for c in convs[1:]]):
        out = tmp_path / f"{mode}-{len(kept)}-{kept[0][-12:-1].replace('/', '_')}.tflite"
        made = quantizer.quantize(flt, WeightsMode() if mode == "weights" else StaticMode(), out,
                                  calib=calib if mode == "static" else None, keep_float=tuple(kept))
        verdicts = {op["scope"]: v for op, v in judged_ops(made.path)[1] if op["type"] == "CONV_2D"}
        assert verdicts == {c["scope"]: ("float" if c["scope"] in kept else "quantized") for c in convs}
        outs = []
        for path in (flt, made.path):
            it = Interpreter(str(path))
            it.allocate_tensors()
            it.set_tensor(it.get_input_details()[0]["index"], x[0])
            it.invoke()
            outs.append(it.get_tensor(it.get_output_details()[0]["index"]))
        assert np.abs(outs[0] - outs[1]).max() < 0.1 * np.abs(outs[0]).max()
