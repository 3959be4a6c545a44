"""The graph ONNX Runtime hands the provider is the graph that was checked: the Jetson artifact leaves ONNX Runtime's
WeightBiasQuantization off (``runtime.settings.disabled_optimizers``), the runner applies it, the TensorRT Q/DQ
rules run on the as-loaded graph, and ``inspect --as-loaded`` shows it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MNIST = REPO / "fixtures" / "models" / "mnist_cnn.onnx"
DATA = REPO / "fixtures" / "data"
WBQ = "WeightBiasQuantization"

pytestmark = [pytest.mark.slow, pytest.mark.onnxruntime]


@pytest.fixture(scope="module")
def orin_int8(tmp_path_factory):
    """The MNIST CNN converted for jetson-orin-nano (ONNX Runtime, tensorrt-preset INT8) by the real converter."""
    from edgeopt import convert

    out = tmp_path_factory.mktemp("orin") / "mnist-orin"
    convert(MNIST, "jetson-orin-nano", out, calib=DATA / "mnist_calib.npz")
    return out


def _manifest(art: Path) -> dict:
    return json.loads((art / "manifest.json").read_text())


def test_the_jetson_int8_artifact_leaves_weight_bias_quantization_off(orin_int8):
    from edgeopt.artifact import OrtSettings

    m = _manifest(orin_int8)
    settings = OrtSettings(**m["runtime"]["settings"])  # typed: every key is one the runner applies
    assert m["precision"] == "int8" and settings.disabled_optimizers == [WBQ]
    # float layers run at the precision they were judged at (FP32): TensorRT's FP16 flag is off for INT8 Q/DQ
    assert "trt_fp16_enable" not in settings.provider_options and settings.provider_options["trt_int8_enable"]
    floats = m["runtime"]["float_layers"]
    assert floats["precision"] == "fp32" and floats["count"] == len(floats["nodes"])
    report = next(s["report"] for s in m["stages"] if s["name"] == "onnxruntime")
    assert report["tensorrt_qdq_as_loaded"]["passed"] and report["tensorrt_qdq_as_loaded"]["int32_dq"] == []


def test_the_as_loaded_check_fails_on_int32_dqs_with_the_optimizer_on_and_passes_with_it_off(orin_int8):
    from edgeopt.as_loaded.tensorrt_check import check_as_loaded
    from edgeopt.errors import GateFailedError

    settings = _manifest(orin_int8)["runtime"]["settings"]
    model = orin_int8 / "model.onnx"
    with pytest.raises(GateFailedError) as err:
        check_as_loaded(model, {**settings, "disabled_optimizers": []})
    facts = err.value.details["tensorrt_qdq_as_loaded"]
    assert err.value.exit_code == 5 and len(facts["int32_dq"]) == 5  # one per Conv (4) and the Gemm
    assert facts["int32_dq"][0] in err.value.message and WBQ in err.value.hint
    assert check_as_loaded(model, settings)["passed"]


def test_the_runner_leaves_the_optimizer_off_where_a_gpu_provider_is_in_the_session(orin_int8, monkeypatch, tmp_path):
    import onnxruntime as ort

    from edgeopt.runtime.runners import open_runner

    real, seen = ort.InferenceSession, []

    def recording_session(path, so, providers=None, **kwargs):  # records; runs on the real CPU provider
        seen.append(([p[0] if isinstance(p, tuple) else p for p in providers], kwargs))
        return real(path, so, providers=["CPUExecutionProvider"], **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", recording_session)
    monkeypatch.setenv("EDGEOPT_WORK_DIR", str(tmp_path))  # where TensorRT's engine cache would go
    with open_runner(str(orin_int8)):  # this build: the CPU alone, where the int32 DQs fuse into QLinearConv
        pass
    assert seen[-1] == (["CPUExecutionProvider"], {})
    # a FAKE build that lists TensorRT: the session gets it, and the optimizer is left off
    monkeypatch.setattr(ort, "get_available_providers", lambda: ["TensorrtExecutionProvider", "CPUExecutionProvider"])
    seen.clear()
    with open_runner(str(orin_int8)):
        pass
    assert seen[0][0][0] == "TensorrtExecutionProvider" and seen[0][1] == {"disabled_optimizers": [WBQ]}
    # the recording session ran on the CPU alone: the runner made it again there, with the CPU's own fusions
    assert seen[-1] == (["CPUExecutionProvider"], {})


def test_inspect_as_loaded_writes_and_summarises_the_graph(orin_int8, tmp_path, cli):
    out = tmp_path / "loaded.onnx"
    r = cli("inspect", str(orin_int8), "--as-loaded", "--as-loaded-out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    loaded = json.loads(r.stdout)["as_loaded"]
    assert out.is_file() and loaded["written"] == str(out)
    assert loaded["optimization_level"] == "ORT_ENABLE_BASIC"  # what a non-CPU provider is offered
    assert loaded["disabled_optimizers"] == [WBQ] and loaded["int32_dq"] == []
    assert loaded["qdq_by_dtype"]["DequantizeLinear:int8"] > 0 and "DequantizeLinear:int32" not in loaded["qdq_by_dtype"]
    assert loaded["op_types"]["Conv"] == 4 and sum(loaded["nodes_per_provider"].values()) == loaded["nodes"]
    text = cli("inspect", str(orin_int8), "--as-loaded", "--as-loaded-out", str(out))
    assert "int32 DequantizeLinear: 0" in text.stdout and WBQ in text.stdout


def test_tensorrt_fp16_is_on_only_for_fp16_artifacts():
    """Float layers run at the precision they were judged at: FP16 for ``--precision fp16``, FP32 otherwise (the
    INT8 search judges the layers it keeps in float at FP32)."""
    from edgeopt.converters.backends.onnxruntime import OnnxRuntimeBackend
    from edgeopt.converters.base import ChainOptions
    from edgeopt.enums import BackendName, Precision
    from edgeopt.profiles import load_profile

    settings = load_profile("jetson-orin-nano").backend(BackendName.ONNXRUNTIME).settings
    assert settings["provider_options"]["trt_fp16_enable"] is True  # the profile asks for it
    options = {p: OnnxRuntimeBackend.configure(ChainOptions(backend=BackendName.ONNXRUNTIME, precision=p,
                                                            backend_settings=settings)).provider_options
               for p in (Precision.FP16, Precision.INT8, Precision.FP32)}
    assert options[Precision.FP16]["trt_fp16_enable"] is True
    assert "trt_fp16_enable" not in options[Precision.INT8] and "trt_fp16_enable" not in options[Precision.FP32]
    assert options[Precision.INT8]["trt_int8_enable"] is True


@pytest.mark.openvino
def test_inspect_as_loaded_counts_openvino_execution_precisions(tmp_path, cli):
    from edgeopt import convert

    art = tmp_path / "digits-ov"
    convert(REPO / "fixtures" / "models" / "digits_cnn.onnx", "host", art, backend="openvino", precision="fp32")
    out = tmp_path / "runtime.xml"
    r = cli("inspect", str(art), "--as-loaded", "--as-loaded-out", str(out), "--json")
    assert r.returncode == 0, r.stderr
    loaded = json.loads(r.stdout)["as_loaded"]
    assert loaded["runtime"] == "openvino" and loaded["device"] == "CPU" and out.is_file()
    assert loaded["inference_precision"] == "f32" and sum(loaded["runtime_precision"].values()) == loaded["nodes"]
    assert loaded["runtime_precision"].get("f32", 0) > 0 and any(k.startswith("Convolution:") for k in
                                                                 loaded["op_type_precision"])


class FakeOrtWithFallback:
    """A fake ONNX Runtime (named so: no TensorRT or GPU exists here) whose TensorRT provider fails to load and
    whose own fallback, as ONNX Runtime's python binding does, re-creates the session on CUDA and the CPU without
    the ``disabled_optimizers`` it was given."""

    def __init__(self):
        self.sessions = []

    def InferenceSession(self, path, so, providers, disabled_optimizers=None):  # noqa: N802 - ONNX Runtime's name
        names = [p[0] if isinstance(p, tuple) else p for p in providers]
        if names[0] == "TensorrtExecutionProvider":  # fails to load: the binding's fallback drops the optimizers
            names, disabled_optimizers = ["CUDAExecutionProvider", "CPUExecutionProvider"], None
        fake = type("FakeSession", (), {"get_providers": lambda self, n=names: list(n)})()
        self.sessions.append({"providers": names, "disabled_optimizers": disabled_optimizers})
        return fake


def test_a_provider_that_fails_to_load_keeps_the_disabled_optimizers():
    """Seen on a real GPU with onnxruntime-gpu and no TensorRT libraries: ONNX Runtime's fallback session ran the
    int32-bias DQs that the artifact's settings turn off. The runner makes the session again, with them."""
    from edgeopt.runtime.runners.onnxruntime import open_session

    ort = FakeOrtWithFallback()
    settings = {"provider": "TensorrtExecutionProvider", "disabled_optimizers": ["WeightBiasQuantization"]}
    providers = [("TensorrtExecutionProvider", {"trt_int8_enable": "True"}), "CUDAExecutionProvider",
                 "CPUExecutionProvider"]
    session = open_session(ort, "model.onnx", None, providers, settings)
    assert session.get_providers()[0] == "CUDAExecutionProvider"
    assert ort.sessions[-1] == {"providers": ["CUDAExecutionProvider", "CPUExecutionProvider"],
                                "disabled_optimizers": ["WeightBiasQuantization"]}
    ort = FakeOrtWithFallback()  # a provider that loads: one session, nothing made twice
    open_session(ort, "model.onnx", None, ["CUDAExecutionProvider", "CPUExecutionProvider"], settings)
    assert ort.sessions == [{"providers": ["CUDAExecutionProvider", "CPUExecutionProvider"],
                             "disabled_optimizers": ["WeightBiasQuantization"]}]
