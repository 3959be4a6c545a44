"""Microcontrollers: the digits CNN through the STM32H743 profile (TFLite Micro op check, run vs LiteRT, arena
bisection, C header, the Cortex-M7 build), and an op TFLM lacks named with its alternative."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"
DATA = REPO / "fixtures" / "data"

pytest.importorskip("tflite_micro", reason="the micro extra (tflite-micro) is not installed")


def test_unsupported_op_is_named_with_its_alternative(monkeypatch):
    from edgeopt.converters.backends.tflite.micro import ops
    from edgeopt.errors import UnsupportedOpError

    monkeypatch.setattr(ops, "tflite_ops", lambda path: ["CONV_2D", "GELU", "Landmarks2TransformMatrix"])
    with pytest.raises(UnsupportedOpError) as err:
        ops.check_tflm_ops("m.tflite", "stm32h7")
    assert "'GELU'" in err.value.message and "Landmarks2TransformMatrix" in err.value.message
    assert "HARD_SWISH" in err.value.hint and err.value.exit_code == 3


@pytest.fixture(scope="module")
def m7_artifact(tmp_path_factory):
    from tests.conftest import run_cli

    out = tmp_path_factory.mktemp("m7") / "digits_m7"
    r = run_cli("convert", DIGITS, "--profile", "stm32h7", "--calib", DATA / "digits_calib.npz",
                "--eval", DATA / "digits_test.npz", "-o", out, "--json")
    assert r.returncode == 0, r.stderr
    return out


@pytest.mark.slow
@pytest.mark.tflite
def test_tflm_runs_the_digits_cnn_like_litert_with_the_arena_found(m7_artifact):
    from edgeopt.converters.backends.tflite.micro.tflm import ARENA_RESOLUTION, open_tflm, run_tflm
    from edgeopt.runtime.runners import open_runner

    manifest = json.loads((m7_artifact / "manifest.json").read_text())
    micro = next(s for s in manifest["stages"] if s["name"] == "tflite")["report"]["micro"]
    arena = micro["arena"]["arena_bytes"]
    assert micro["accuracy"]["drop"] <= 1.0 and micro["accuracy"]["samples"] > 0
    model = m7_artifact / "model.tflite"
    interp = open_tflm(model, arena)
    with pytest.raises(RuntimeError):  # the arena found is the smallest, to the resolution
        open_tflm(model, arena - 2 * ARENA_RESOLUTION)
    runner = open_runner(str(m7_artifact))
    x = np.load(DATA / "digits_test.npz")["input"][:20].astype(np.float32)
    agree = 0
    for i in range(len(x)):
        litert = runner.run({"input": x[i:i + 1]})["logits"]
        tflm = run_tflm(interp, [np.transpose(x[i:i + 1], (0, 2, 3, 1))])[0]
        agree += int(np.argmax(litert) == np.argmax(tflm))
        assert np.allclose(litert, tflm, atol=0.25)  # the same INT8 model, reference vs XNNPACK kernels
    assert agree == len(x)
    header = (m7_artifact / "model_data.h").read_text()
    assert f"#define EDGEOPT_ARENA_BYTES {arena}" in header and "EDGEOPT_INPUT0_SHAPE {1, 8, 8, 1}" in header
    assert "EDGEOPT_OUTPUT0_ZERO_POINT" in header
    assert manifest["memory"]["measured"]["arena_bytes"] == arena and manifest["memory"]["predicted"]["weights_in_flash"]


@pytest.mark.slow
@pytest.mark.tflite
def test_c_export_compiles_for_cortex_m7_and_flash_is_reported(m7_artifact, tmp_path):
    if shutil.which("arm-none-eabi-gcc") is None:
        pytest.skip("arm-none-eabi-gcc is not installed (Debian: apt-get install gcc-arm-none-eabi)")
    from edgeopt.converters.backends.tflite.micro.firmware import compile_firmware
    from edgeopt.converters.backends.tflite.micro.target import MicroTarget
    from edgeopt.converters.c_export import write_c_array

    manifest = json.loads((m7_artifact / "manifest.json").read_text())
    fw = next(s for s in manifest["stages"] if s["name"] == "tflite")["report"]["micro"]["firmware"]
    size = (m7_artifact / "model.tflite").stat().st_size
    assert fw["cpu"] == "cortex-m7" and "-mfpu=fpv5-d16" in fw["flags"]
    assert size <= fw["flash_bytes"] < size + 64 * 1024 and fw["flash_available_bytes"] == 2048 * 1024
    c = write_c_array(m7_artifact / "model.tflite", tmp_path, "digits")
    from edgeopt.errors import GateFailedError

    with pytest.raises(GateFailedError):  # a part with too little flash is refused with the figures
        compile_firmware(tmp_path, c, MicroTarget(cpu="cortex-m7", fpu="fpv5-d16", flash_bytes=size // 2))


@pytest.mark.realmodels
@pytest.mark.tflite
def test_mediapipes_custom_op_is_named_on_the_real_model():
    from edgeopt.converters.backends.tflite.micro.ops import check_tflm_ops
    from edgeopt.errors import UnsupportedOpError
    from fixtures.real_models import real_model

    try:
        path = real_model("mediapipe_face_landmark_attention")
    except Exception as err:  # noqa: BLE001 - the package is a test extra
        pytest.skip(f"mediapipe's model is not installed: {err}")
    with pytest.raises(UnsupportedOpError) as err:
        check_tflm_ops(path, "stm32h7")
    assert "Landmarks2TransformMatrix" in err.value.message and "custom op" in err.value.hint


@pytest.mark.slow
@pytest.mark.tflite
def test_predicted_tflm_memory_is_within_15_percent_of_its_allocator(m7_artifact):
    """The arena plan and TFLM's persistent part (counted on the ops and tensors the .tflite holds) against what
    TFLM's recording allocator reports at the arena found."""
    from edgeopt.memory.predict import predict_memory

    manifest = json.loads((m7_artifact / "manifest.json").read_text())
    alloc = next(s for s in manifest["stages"] if s["name"] == "tflite")["report"]["micro"]["arena"]["allocations"]
    pred = predict_memory(DIGITS, "tflite", "int8", microcontroller=True)
    assert pred.arena_bytes == alloc["head_bytes"]
    assert abs(pred.total_bytes - alloc["total_bytes"]) <= 0.15 * alloc["total_bytes"]
