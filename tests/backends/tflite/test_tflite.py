"""The TFLite (LiteRT) backend: onnx2tf conversion through the real CLI, the runner, C export, .tflite input."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[3]
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"
DIGITS_CALIB = REPO / "fixtures" / "data" / "digits_calib.npz"
DIGITS_TEST = REPO / "fixtures" / "data" / "digits_test.npz"

pytestmark = pytest.mark.tflite


def _json(proc) -> dict:
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    return json.loads(lines[0])


def _ort(model: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


def _fp32_tflite(cli, tmp_path: Path, graph, opset: int):
    """``graph`` saved as tmp_path/model.onnx and converted with ``--backend tflite --precision fp32``."""
    import onnx
    from onnx import helper as h

    model = h.make_model(graph, opset_imports=[h.make_opsetid("", opset)])
    model.ir_version = 9
    onnx.save(model, str(tmp_path / "model.onnx"))
    out = tmp_path / "art"
    return cli("convert", str(tmp_path / "model.onnx"), "--backend", "tflite", "--precision", "fp32", "-o", str(out),
               "--json"), out


# ----------------------------------------------------------------------------- fast


def test_c_identifier():
    from edgeopt.converters.c_export import c_identifier

    assert c_identifier("digits_cnn") == "digits_cnn"
    assert c_identifier("3-my model.v2") == "_3_my_model_v2"
    assert c_identifier("int") == "int_"
    assert c_identifier("---") == "model"


@pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc not installed")
def test_c_export_roundtrip_gcc(tmp_path):
    """model_data.c compiles with gcc; a tiny program writes the array back out: same bytes, 16-aligned."""
    from edgeopt.converters.c_export import write_c_array

    blob = np.random.default_rng(0).integers(0, 256, 1237, dtype=np.uint8).tobytes()  # odd length, all byte values
    model = tmp_path / "my-model.tflite"
    model.write_bytes(blob)
    info = write_c_array(model, tmp_path, "my-model")
    assert info["array"] == "g_my_model_model_data" and info["bytes"] == len(blob)
    main = tmp_path / "main.c"
    main.write_text(
        '#include <stdio.h>\n#include <stdint.h>\n#include "model_data.h"\n'
        "int main(int argc, char **argv) {\n"
        "  if ((uintptr_t)g_my_model_model_data % 16 != 0) return 2;\n"
        "  FILE *f = fopen(argv[1], \"wb\");\n"
        "  fwrite(g_my_model_model_data, 1, g_my_model_model_data_len, f);\n"
        "  return fclose(f);\n}\n")
    exe = tmp_path / "roundtrip"
    subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-o", str(exe), str(main), str(tmp_path / "model_data.c"),
                    f"-I{tmp_path}"], check=True, capture_output=True)
    back = tmp_path / "back.bin"
    subprocess.run([str(exe), str(back)], check=True)
    assert back.read_bytes() == blob


def test_no_tensorflow_outside_conversion():
    """The backend module, the runner and a runner on a model keep TensorFlow out of the process."""
    code = ("import sys; import edgeopt.converters.backends.tflite, edgeopt.runtime.runners.tflite, edgeopt.cli.commands\n"
            "assert 'tensorflow' not in sys.modules and 'onnx2tf' not in sys.modules, 'tensorflow imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_fake_runner_quantizes_int8_io():
    """Fake tensor details (no model): float arrays are quantized with scale/zero point and back."""
    from edgeopt.runtime.runners.tflite import dequantize, quantize

    d = {"dtype": np.int8, "quantization": (0.5, -3)}
    q = quantize(np.array([0.0, 1.0, 100.0, -100.0], np.float32), d)
    assert q.dtype == np.int8 and q.tolist() == [-3, -1, 127, -128]
    assert dequantize(q, d).tolist() == [0.0, 1.0, 65.0, -62.5]


# ----------------------------------------------------------------------------- conversions (slow)


@pytest.fixture(scope="module")
def fp32_artifact(tmp_path_factory):
    from conftest import run_cli

    out = tmp_path_factory.mktemp("tfl") / "fp32"
    proc = run_cli("convert", str(DIGITS), "--backend", "tflite", "--precision", "fp32", "--eval", str(DIGITS_TEST),
                   "-o", str(out), "--json")
    return out, proc


@pytest.mark.slow
def test_fp32_digits_cli_matches_ort(fp32_artifact):
    out, proc = fp32_artifact
    assert proc.returncode == 0, proc.stderr[-3000:]
    payload = _json(proc)
    v = payload["validation"]
    assert payload["backend"] == "tflite" and payload["precision"] == "fp32"
    assert v["cosine_min"] > 0.9999 and v["samples"] == 540 and v["accuracy_drop"] == 0.0
    m = json.loads((out / "manifest.json").read_text())
    assert set(m["files"]) == {"model.tflite", "onnx2tf.log", "load.py", "load.cc"}  # + the plain-API loaders
    assert "onnx2tf" in (out / "onnx2tf.log").read_text()  # its output went to the log, not to our stdout
    io = m["runtime"]["io"]
    assert io["inputs"] == [{"name": "input", "runtime_name": "input", "transpose": [0, 2, 3, 1]}]
    assert io["outputs"] == [{"name": "logits", "runtime_name": "output_0", "transpose": None}]


@pytest.mark.slow
def test_runner_transposes_nchw_transparently(fp32_artifact):
    from ai_edge_litert.interpreter import Interpreter

    from edgeopt.runtime.runners import open_runner

    out, proc = fp32_artifact
    assert proc.returncode == 0, proc.stderr[-3000:]
    interp = Interpreter(model_path=str(out / "model.tflite"))
    assert interp.get_input_details()[0]["shape"].tolist() == [1, 8, 8, 1]  # NHWC inside
    x = np.load(DIGITS_TEST)["input"][:5]
    with open_runner(str(out), threads=1) as runner:
        for i in range(len(x)):
            got = runner.run({"input": x[i:i + 1]})  # NCHW, as for the ONNX model
            np.testing.assert_allclose(got["logits"], _ort(DIGITS, x[i:i + 1]), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_int8_digits_cli_int8_io_and_c_export(tmp_path, cli):
    from ai_edge_litert.interpreter import Interpreter

    from edgeopt.runtime.runners import open_runner

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("stages:\n  tflite:\n    io_dtype: int8\n")
    out = tmp_path / "int8"
    proc = cli("convert", str(DIGITS), "--backend", "tflite", "--precision", "int8", "--calib", str(DIGITS_CALIB),
               "--eval", str(DIGITS_TEST), "--recipe", str(recipe), "--export-c", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    v = _json(proc)["validation"]
    assert v["accuracy_drop"] <= 2.0 and v["accuracy"] >= 97.0 and v["samples"] == 540
    m = json.loads((out / "manifest.json").read_text())
    assert m["calibration"]["samples"] > 0 and not m["calibration"]["synthetic"]
    interp = Interpreter(model_path=str(out / "model.tflite"))
    assert interp.get_input_details()[0]["dtype"] == np.int8 and interp.get_output_details()[0]["dtype"] == np.int8
    x = np.load(DIGITS_TEST)["input"][:1]
    with open_runner(str(out)) as runner:
        y = runner.run({"input": x})["logits"]
    assert y.dtype == np.float32 and y.shape == (1, 10) and np.argmax(y) == np.argmax(_ort(DIGITS, x))
    c_src = (out / "model_data.c").read_text()
    assert "alignas(16) const unsigned char g_digits_cnn_model_data[]" in c_src
    assert f"g_digits_cnn_model_data_len = {(out / 'model.tflite').stat().st_size};" in c_src


@pytest.mark.slow
def test_unsupported_onnx_op_exit_3(tmp_path, cli):
    """LpPool runs in ONNX Runtime but onnx2tf has no converter for it: exit 3 naming the op."""
    from onnx import TensorProto as T
    from onnx import helper as h

    graph = h.make_graph([h.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2], p=2)], "lp",
                         [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 3, 4, 4])])
    proc, out = _fp32_tflite(cli, tmp_path, graph, 18)
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "LpPool" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists() and not list(tmp_path.glob("art.tmp-*"))


@pytest.mark.slow
def test_erf_of_an_exact_gelu_converts_to_builtins(tmp_path, cli):
    """A transformer's exact GELU (x * 0.5 * (1 + Erf(x * 0.7071)), as MiniLM's export has it after folding):
    onnx2tf would write the Select-TF op tf.Erf and the build fail; it is written as builtins (onnx2tf's
    pseudo Erf) and the .tflite matches ONNX Runtime."""
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    w = nh.from_array(rng.normal(0, 0.5, (16, 32)).astype(np.float32), "w")
    consts = [nh.from_array(np.array(v, np.float32), n) for n, v in (("r2", 0.70710677), ("one", 1.0), ("half", 0.5))]
    nodes = [h.make_node("MatMul", ["x", "w"], ["m"]), h.make_node("Mul", ["m", "r2"], ["s"]),
             h.make_node("Erf", ["s"], ["e"]), h.make_node("Add", ["e", "one"], ["a"]),
             h.make_node("Mul", ["m", "a"], ["g"]), h.make_node("Mul", ["g", "half"], ["y"])]
    graph = h.make_graph(nodes, "gelu", [h.make_tensor_value_info("x", T.FLOAT, [1, 8, 16])],
                         [h.make_tensor_value_info("y", T.FLOAT, [1, 8, 32])], [w, *consts])
    proc, out = _fp32_tflite(cli, tmp_path, graph, 17)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "-rtpo Erf" in (out / "onnx2tf.log").read_text()
    from edgeopt.runtime.runners import open_runner

    x = rng.normal(0, 1, (1, 8, 16)).astype(np.float32)
    with open_runner(str(out)) as runner:
        got = next(iter(runner.run({"x": x}).values()))
    np.testing.assert_allclose(got, _ort(tmp_path / "model.onnx", x), atol=1e-5)


# ----------------------------------------------------------------------------- .tflite files (real models)


def _real(name: str) -> Path:
    from fixtures.real_models import FixtureMissing, real_model

    try:
        return real_model(name)
    except FixtureMissing as err:
        pytest.skip(str(err))


@pytest.mark.realmodels
def test_blazeface_wrapped_finds_faces_on_lfw(tmp_path):
    """BlazeFace as shipped, wrapped as an artifact: faces vs non-faces of lfw_subset (person-labelled)."""
    from edgeopt.runtime.runners import open_runner
    from edgeopt.wrapped_artifact import wrap_model_file as wrap_tflite
    from fixtures.datasets import lfw_faces

    art = wrap_tflite(_real("blazeface"), tmp_path / "bf")
    m = json.loads((art / "manifest.json").read_text())
    assert m["backend"] == "tflite" and [t["name"] for t in m["outputs"]] == ["regressors", "classificators"]
    assert m["inputs"][0]["shape"] == [1, 128, 128, 3]
    z = np.load(lfw_faces())
    x, labels = z["input"], z["labels"]
    with open_runner(str(art)) as runner:
        best = np.array([runner.run({"input": x[i:i + 1]})["classificators"].max() for i in range(len(x))])
    found = best > 0.0  # logit 0 = score 0.5
    assert found[labels == 1].sum() >= 95 and found[labels == 0].sum() <= 5


@pytest.mark.realmodels
def test_bench_accepts_tflite_file(cli, tmp_path):
    proc = cli("bench", str(_real("blazeface")), "--json", "--runs", "3", "--min-seconds", "0", "--warmup", "1",
               "--no-store", env={"EDGEOPT_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = _json(proc)["rows"]
    assert len(rows) == 1 and rows[0]["latency_ms"]["p50"] > 0


@pytest.mark.realmodels
def test_custom_op_tflite_exit_3(cli, tmp_path):
    proc = cli("bench", str(_real("mediapipe_face_landmark_attention")), "--json", "--runs", "1", "--no-store",
               env={"EDGEOPT_CACHE_DIR": str(tmp_path)})
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert "Landmarks2TransformMatrix" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
@pytest.mark.realmodels
def test_basic_pitch_fp32_matches_shipped_tflite(tmp_path, cli):
    """basic-pitch's nmp.onnx converted by edgeopt agrees with the nmp.tflite it ships (synthetic chord input)."""
    from edgeopt.runtime.runners import open_runner
    from edgeopt.wrapped_artifact import wrap_model_file as wrap_tflite

    onnx_path, shipped = _real("basic_pitch_onnx"), _real("basic_pitch_tflite")
    out = tmp_path / "bp"
    proc = cli("convert", str(onnx_path), "--backend", "tflite", "--precision", "fp32", "--input-shape",
               "serving_default_input_2:0=1x43844x1", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    t = np.arange(43844) / 22050
    x = (0.3 * np.sin(2 * np.pi * 440 * t) + 0.2 * np.sin(2 * np.pi * 554.37 * t)).astype(np.float32).reshape(1, -1, 1)
    with open_runner(str(out)) as ours, open_runner(str(wrap_tflite(shipped, tmp_path / "shipped"))) as theirs:
        a, b = ours.run({"serving_default_input_2:0": x}), theirs.run({"input_2": x})
    assert sorted(b) == ["contour", "note", "onset"]
    for i, name in enumerate(sorted(b)):  # tf2onnx's StatefulPartitionedCall:i is the i-th sorted Keras output
        assert a[f"StatefulPartitionedCall:{i}"].shape == b[name].shape
        assert np.max(np.abs(a[f"StatefulPartitionedCall:{i}"] - b[name])) <= 1e-5


def test_missing_onnx2tf_exit_4_names_extra(tmp_path, cli, simulate_missing):
    out = tmp_path / "art"
    proc = cli("convert", str(DIGITS), "--backend", "tflite", "--precision", "fp32", "-o", str(out), "--json",
               env=simulate_missing("onnx2tf"))
    assert proc.returncode == 4, proc.stderr[-2000:]
    err = _json(proc)["error"]
    assert "tflite" in err["message"] and "edgeopt[tflite]" in err["hint"] and not out.exists()


@pytest.mark.slow
def test_fp16_digits_half_size(tmp_path, cli, fp32_artifact):
    out = tmp_path / "fp16"
    proc = cli("convert", str(DIGITS), "--backend", "tflite", "--precision", "fp16", "--eval", str(DIGITS_TEST),
               "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    v = _json(proc)["validation"]
    assert v["cosine_min"] > 0.999 and v["accuracy_drop"] <= 0.5
    size16, size32 = (out / "model.tflite").stat().st_size, (fp32_artifact[0] / "model.tflite").stat().st_size
    assert size16 < 0.6 * size32
