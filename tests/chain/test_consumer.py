"""The consumer check: load.py/load.cc beside every artifact, loaded through the runtime's plain API."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from edgeopt.artifact import load_artifact
from edgeopt.consumer.check import consumer_check
from edgeopt.convert import convert
from edgeopt.data import Dataset
from edgeopt.errors import ExitCode, GateFailedError
from edgeopt.runtime.runners import open_runner

REPO = Path(__file__).resolve().parents[2]
MNIST = REPO / "fixtures" / "models" / "mnist_cnn.onnx"
MNIST_TEST = REPO / "fixtures" / "data" / "mnist_test.npz"
MNIST_CALIB = REPO / "fixtures" / "data" / "mnist_calib.npz"


def _samples(n: int = 8) -> Dataset:
    with np.load(MNIST_TEST) as f:
        return Dataset(arrays={"input": f["input"][:n]}, ranks={"input": 4})


def _import_load(artifact: Path):
    spec = importlib.util.spec_from_file_location(f"load_{artifact.name}", artifact / "load.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _runner_outputs(artifact: Path, feeds: list[dict]) -> list[dict]:
    with open_runner(str(artifact)) as runner:
        return [runner.run(f) for f in feeds]


def _assert_load_py_matches(artifact: Path) -> dict:
    """load.py imported (no edgeopt in it) gives the runner's outputs; returns what it reported it applied."""
    text = (artifact / "load.py").read_text()
    assert "import edgeopt" not in text and "from edgeopt" not in text
    run = _import_load(artifact).load(str(artifact))
    feeds = _samples(4).feeds()
    for ref, feed in zip(_runner_outputs(artifact, feeds), feeds, strict=True):
        got = run(feed)
        for name, r in ref.items():
            np.testing.assert_allclose(got[name], r, rtol=0, atol=1e-4 * float(np.max(np.abs(r))))
    return run.applied


def _convert(tmp_path: Path, name: str, profile: str, **kw) -> Path:
    out = tmp_path / name
    convert(str(MNIST), profile, out, eval=str(MNIST_TEST), **kw)
    return out


@pytest.mark.openvino
def test_openvino_load_py_compiles_at_the_judged_hint_and_matches_the_runner(tmp_path):
    out = _convert(tmp_path, "ov", "host", backend="openvino", precision="fp32")
    m = load_artifact(out)  # load.py and load.cc are listed with their sha256
    assert {"load.py", "load.cc"} <= set(m.files) and m.consumer_check.files == ["load.py", "load.cc"]
    judged = m.runtime.settings["inference_precision"]
    applied = _assert_load_py_matches(out)
    assert applied["INFERENCE_PRECISION_HINT"] == judged == "f32"
    check = m.consumer_check
    assert check.passed and check.relative_tolerance and check.with_settings.max_abs_diff is not None
    assert check.with_settings.applied["INFERENCE_PRECISION_HINT"] == judged
    honours = {s.name: s.plain_api_honours for s in check.settings}
    assert honours["inference_precision"] is False  # the IR alone does not carry it
    assert f"ov::element::{judged}" in (out / "load.cc").read_text()
    bare_hint = check.bare.applied["INFERENCE_PRECISION_HINT"]
    # where this CPU's plain default is another precision, the artifact was judged there too
    assert (check.plain_default is not None) == (bare_hint != judged)


@pytest.mark.onnxruntime
def test_onnxruntime_load_py_matches_and_a_removed_setting_fails_the_check(tmp_path):
    out = _convert(tmp_path, "ort", "host", backend="onnxruntime", precision="int8", calib=str(MNIST_CALIB))
    m = load_artifact(out)
    assert m.consumer_check.passed and m.consumer_check.bare is not None
    _assert_load_py_matches(out)
    cc = (out / "load.cc").read_text()
    assert f"GraphOptimizationLevel::{m.runtime.settings['graph_optimization_level']}" in cc
    manifest = json.loads((out / "manifest.json").read_text())
    assert consumer_check(out, manifest, _samples(), files=["load.py"]).passed  # re-run as written: holds
    # the graph optimization level taken out of load.py (ONNX Runtime's default, ORT_ENABLE_ALL, applies instead)
    text = (out / "load.py").read_text()
    level = f"'graph_optimization_level': '{m.runtime.settings['graph_optimization_level']}', "
    assert level in text
    (out / "load.py").write_text(text.replace(level, ""))
    with pytest.raises(GateFailedError) as err:
        consumer_check(out, manifest, _samples(), files=["load.py"])
    assert err.value.exit_code == ExitCode.GATE_FAILED and "onnxruntime" in err.value.message
    assert "graph_optimization_level" in err.value.message
    # the manifest tampered instead: the settings load.py carries are no longer the ones judged
    (out / "load.py").write_text(text)
    manifest["runtime"]["settings"]["threads"] = 3
    with pytest.raises(GateFailedError) as err:
        consumer_check(out, manifest, _samples(), files=["load.py"])
    assert "threads" in err.value.message


def test_load_py_outputs_that_differ_from_the_runner_fail_the_check(tmp_path):
    out = _convert(tmp_path, "ort", "host", backend="onnxruntime", precision="fp32")
    manifest = json.loads((out / "manifest.json").read_text())
    text = (out / "load.py").read_text()
    (out / "load.py").write_text(text.replace("return dict(zip(onnx_names, session.run(out_names, given)",
                                              "return dict(zip(onnx_names, [1.01 * o for o in session.run("
                                              "out_names, given)]"))
    with pytest.raises(GateFailedError) as err:
        consumer_check(out, manifest, _samples(), files=["load.py"])
    assert err.value.exit_code == ExitCode.GATE_FAILED
    assert "differs from edgeopt's runner" in err.value.message and "logits" in err.value.message


@pytest.mark.onnxruntime
def test_disabled_optimizers_travel_to_load_py_and_load_cc(tmp_path):
    out = _convert(tmp_path, "ort", "host", backend="onnxruntime", precision="fp32")
    manifest = json.loads((out / "manifest.json").read_text())
    manifest["runtime"]["settings"]["disabled_optimizers"] = ["ConstantFolding"]
    from edgeopt.consumer.writer import write_loaders

    write_loaders(out, manifest)  # on the CPU alone load.cc leaves them out too
    assert "disable_specified_optimizers" not in (out / "load.cc").read_text()
    manifest["runtime"]["settings"]["fallback_providers"] = ["CUDAExecutionProvider"]
    write_loaders(out, manifest)
    cc = (out / "load.cc").read_text()
    assert 'if (has("CUDAExecutionProvider"))' in cc and "if (accelerated)" in cc
    assert '"optimization.disable_specified_optimizers", "ConstantFolding"' in cc
    snippet = _import_load(out)
    # as edgeopt's runner: applied where a provider other than the CPU is in the session, left out on the CPU alone
    assert snippet.load(str(out)).applied["disabled_optimizers"] == []
    assert snippet._kwargs(["CUDAExecutionProvider", "CPUExecutionProvider"]) == {"disabled_optimizers": ["ConstantFolding"]}


@pytest.mark.slow
@pytest.mark.tflite
def test_tflite_load_py_loads_and_matches(tmp_path):
    out = _convert(tmp_path, "tfl", "pi5", precision="fp32")
    m = load_artifact(out)
    assert m.backend == "tflite" and m.consumer_check.passed
    assert _assert_load_py_matches(out)["num_threads"] == m.runtime.settings["threads"]
    assert "builder.SetNumThreads(" in (out / "load.cc").read_text()


@pytest.mark.slow
@pytest.mark.tvm
def test_tvm_load_py_loads_and_matches(tmp_path):
    out = _convert(tmp_path, "tvm", "host", backend="tvm", precision="fp32")
    m = load_artifact(out)
    assert m.backend == "tvm" and m.consumer_check.passed
    _assert_load_py_matches(out)
    assert "Module::LoadFromFile" in (out / "load.cc").read_text()


def test_the_plain_default_is_named_where_it_differs_and_a_bf16_target_unjudged_here_is_said():
    from edgeopt.consumer import plain_default as pd
    from edgeopt.consumer.model import ConsumerCheck, PlainLoad
    from edgeopt.converters.backends.openvino import consumer as ov
    from edgeopt.profiles import resolve_profile

    manifest = {"runtime": {"backend": "openvino", "model": "model.xml",
                            "settings": {"device": "CPU", "inference_precision": "f32"}}}

    def record(hint: str) -> ConsumerCheck:
        return ConsumerCheck(runtime="openvino", bare=PlainLoad(how="bare", applied={"INFERENCE_PRECISION_HINT": hint}))

    avx512, _ = resolve_profile("x86-avx512")
    pi5, _ = resolve_profile("pi5")
    found = pd.plain_default(record("bf16"), manifest, pi5)
    assert found[1:] == ("inference_precision", "f32", "bf16") and "load.py" in found.line
    assert pd.plain_default(record("f32"), manifest, pi5) is None
    npu = {"runtime": {**manifest["runtime"], "settings": {"device": "NPU", "inference_precision": "f16"}}}
    assert pd.plain_default(record("bf16"), npu, avx512) is None  # the NPU's plain default is the NPU's own
    assert ov.target_runs_bf16(avx512) and not ov.target_runs_bf16(pi5)
    unjudged = pd.plain_default(record("f32"), manifest, avx512)  # this machine could not run its default
    assert unjudged.ran is None and "load.cc" in unjudged.line and "x86-avx512" in unjudged.line
    assert pd.plain_default(record("bf16"), {**manifest, "runtime": {**manifest["runtime"], "settings": {
        "device": "CPU", "inference_precision": "bf16"}}}, avx512) is None  # judged at bf16 here instead
    ort = {"runtime": {"backend": "onnxruntime", "model": "model.onnx", "settings": {}}}
    assert pd.plain_default(record("bf16"), ort, avx512) is None  # no plain default to name for ONNX Runtime


def _scalar_input_model(path: Path) -> Path:
    """y = (x @ W) * sr / 16000 with ``sr`` a 0-d int64 input, as Silero VAD's sample rate."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32), "W")
    k = numpy_helper.from_array(np.array(1 / 16000, np.float32), "k")
    nodes = [helper.make_node("Cast", ["sr"], ["srf"], to=TensorProto.FLOAT), helper.make_node("Mul", ["srf", "k"], ["s"]),
             helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Mul", ["h", "s"], ["y"])]
    graph = helper.make_graph(nodes, "scalar", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16]),
                                                helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w, k])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.slow
@pytest.mark.tvm
def test_tvm_load_py_passes_a_0d_input_as_0d(tmp_path):
    """TVM's VM checks each input's rank: a 0-d sample rate made 1-d by np.ascontiguousarray fails there."""
    data = tmp_path / "data.npz"
    rng = np.random.default_rng(1)
    np.savez(data, x=rng.standard_normal((24, 1, 16)).astype(np.float32), sr=np.full(24, 16000, np.int64))
    out = tmp_path / "tvm"
    convert(str(_scalar_input_model(tmp_path / "scalar.onnx")), "host", out, backend="tvm", precision="fp32",
            eval=str(data))
    check = load_artifact(out).consumer_check
    assert check.passed and check.with_settings.max_abs_diff <= 1e-6 and check.samples > 0


def test_each_backend_brings_its_own_load_snippets_through_its_hooks(tmp_path):
    """load.py's runtime part, load.cc and the plain-API facts come from the backend's hooks; a backend with the
    default hooks gets no loaders (its consumer check is recorded as skipped)."""
    from edgeopt.consumer.honours import carried_settings
    from edgeopt.consumer.writer import write_loaders
    from edgeopt.converters.hooks import BackendHooks
    from edgeopt.converters.registry import backend_hooks

    tensor = {"name": "x", "shape": [1, 4], "dtype": "float32"}
    own = {n: h for n, h in backend_hooks().items() if type(h) is not BackendHooks}  # not a plugin without hooks
    assert {"onnxruntime", "openvino", "tflite", "tvm"} <= {n.value for n in own}
    for name, hooks in own.items():
        template = hooks.load_py_template()
        assert template is not None and template.is_file(), name
        manifest = {"runtime": {"backend": name.value, "model": "model.bin", "settings": {"threads": 2}},
                    "inputs": [tensor], "outputs": [{**tensor, "name": "y"}], "precision": "fp32", "profile": "host"}
        out = tmp_path / name.value
        out.mkdir()
        assert write_loaders(out, manifest) == ["load.py", "load.cc"]
        assert "model.bin" in (out / "load.py").read_text() and "model.bin" in (out / "load.cc").read_text()
        threads = carried_settings(name.value, {"threads": 2})[0]
        assert threads["plain_api_honours"] is False and threads["how"] != "applied by load.py as edgeopt's " \
                                                                         "runner applies it", name
    assert BackendHooks().load_py_template() is None and BackendHooks().plain_api_settings() == {}
