"""Native float precisions: which a profile+backend has, ``--precision bf16`` on OpenVINO where
the CPU runs it (AMX/AVX512-BF16), refused elsewhere, and the artifact labelled bf16, never fp32."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeopt.converters.base import ChainOptions
from edgeopt.enums import BackendName, Precision
from edgeopt.errors import UsageError
from edgeopt.profiles import load_profile

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"
DATA = REPO / "fixtures" / "data"
BF16, FP16, FP32 = Precision.BF16, Precision.FP16, Precision.FP32


@pytest.mark.parametrize(("profile", "backend", "expected"), [
    ("x86-avx512", "openvino", [BF16, FP32]),  # AMX-BF16: OpenVINO's CPU plugin runs bf16
    ("x86-avx512", "onnxruntime", [FP32]),  # ORT's CPU provider has no bf16 model precision; AVX512-FP16 not counted
    ("x86-avx512", "tflite", [FP32]),
    ("pi5", "tflite", [FP16, FP32]),  # Cortex-A76: ARMv8.2 FP16 arithmetic (asimdhp)
    ("pi5", "onnxruntime", [FP16, FP32]),
    ("pi5", "tvm", [FP32]),  # TVM makes no fp16 models here
    ("rpi4", "tflite", [FP32]),  # Cortex-A72: no FP16 arithmetic
    ("jetson-orin-nano", "onnxruntime", [FP16, FP32]),  # the GPU
    ("intel-npu", "openvino", [FP16, FP32]),  # its first OpenVINO target is the NPU
])
def test_native_float_precisions_follow_the_profiles_unit_fastest_first_fp32_last(profile, backend, expected):
    from edgeopt.float_precisions import native_float_precisions

    assert native_float_precisions(load_profile(profile), backend) == expected


def test_fp16_needs_the_units_stated_fp16_throughput_to_beat_fp32():
    from edgeopt.float_precisions import native_float_precisions

    pi5 = load_profile("pi5")
    cpu = pi5.compute_units[0]
    flat = cpu.model_copy(update={"peak_gops": cpu.peak_gops.model_copy(update={"fp16": cpu.peak_gops.fp32})})
    assert native_float_precisions(pi5.model_copy(update={"compute_units": (flat,)}), "tflite") == [FP32]


def test_bf16_is_planned_only_where_the_unit_runs_it_and_an_fp32_artifact_never_runs_bf16():
    from edgeopt.converters.backends.openvino import BACKEND
    from edgeopt.plan import make_plan

    plan = make_plan(load_profile("x86-avx512"), backend="openvino", precision="bf16")
    assert plan.precision == BF16
    ov = next(s for s in plan.stages if s.name == "openvino").config
    assert ov.precision == BF16 and ov.inference_precision == "bf16"  # the profile's f32 hint gives way
    with pytest.raises(UsageError, match="no native bf16"):
        make_plan(load_profile("intel-npu"), backend="openvino", precision="bf16")
    with pytest.raises(UsageError, match="cannot make bf16"):
        make_plan(load_profile("x86-avx512"), backend="onnxruntime", precision="bf16")
    with pytest.raises(UsageError, match="would run an fp32 artifact in bf16"):  # fp32 label, bf16 run: refused
        BACKEND.configure(ChainOptions(backend=BackendName.OPENVINO, precision=FP32,
                                       backend_settings={"inference_precision": "bf16"}))


def _host_has_bf16() -> bool:
    from edgeopt.float_precisions import native_float_precisions

    return BF16 in native_float_precisions(load_profile("host"), "openvino")


@pytest.mark.openvino
def test_convert_bf16_on_this_host_writes_an_artifact_labelled_and_run_in_bf16(tmp_path, cli):
    if not _host_has_bf16():
        pytest.skip("this CPU has no AMX/AVX512-BF16")
    out = tmp_path / "bf16"
    r = cli("convert", str(DIGITS), "--profile", "host", "--backend", "openvino", "--precision", "bf16",
            "--calib", str(DATA / "digits_calib.npz"), "--eval", str(DATA / "digits_test.npz"),
            "--max-accuracy-drop", "1", "--threads", "2", "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["precision"] == "bf16" and manifest["runtime"]["settings"]["inference_precision"] == "bf16"
    assert manifest["validation"]["accuracy_drop"] <= 1.0  # checked against the bound like every candidate
    from edgeopt.runtime.runners import open_runner

    with open_runner(str(out), threads=2) as runner:
        assert runner.properties["INFERENCE_PRECISION_HINT"] == "bf16"  # what the CPU plugin compiled it with
