"""When no INT8 holds the bound on any of an ARM profile's backends, ``convert`` writes the best float precision
that holds, labelled as such ("INT8 where any INT8 mode holds; otherwise the best precision that
holds, labelled"): FP16 where the device computes it natively, else FP32; ``--no-fallback`` makes it exit 5."""

from __future__ import annotations

import json

import pytest
import yaml

from edgeopt.converters.backends.onnxruntime.stage import OnnxRuntimeBackend, OnnxRuntimeConfig
from edgeopt.enums import Precision
from edgeopt.errors import GateFailedError

NAME = "int8-never-holds"  # ONNX Runtime, except that every INT8 build misses the bound (a named fake)


class Int8NeverHoldsConfig(OnnxRuntimeConfig):
    int8: bool = False


class Int8NeverHoldsBackend(OnnxRuntimeBackend):
    name = NAME
    Config = Int8NeverHoldsConfig

    @classmethod
    def configure(cls, options) -> Int8NeverHoldsConfig:
        return Int8NeverHoldsConfig(**OnnxRuntimeBackend.configure(options).model_dump(),
                                    int8=options.precision == Precision.INT8)

    def run(self, model, config, ctx):
        if config.int8:
            raise GateFailedError(f"{NAME}: INT8 misses --max-accuracy-drop 1: best top1 12.00 % vs FP32 97.00 %")
        return super().run(model, config, ctx)


BACKEND = Int8NeverHoldsBackend


@pytest.fixture
def int8_never_holds():
    from edgeopt.converters.registry import register_backend, unregister_backend

    register_backend(NAME, __name__)
    yield NAME
    unregister_backend(NAME)


def _arm_profile(tmp_path, *, native_fp16: bool):
    from importlib.resources import files

    data = yaml.safe_load((files("edgeopt.device_profiles") / "pi5.yaml").read_text())
    for key in ("aliases", "family", "family_default"):
        data.pop(key, None)
    data["name"] = "pi5-no-int8"
    data["backends"] = [{"name": NAME, "unit": "cpu", "settings": {"threads": 2}}]
    if not native_fp16:  # as rpi4's Cortex-A72: FP16 no faster than FP32
        data["compute_units"][0]["peak_gops"]["fp16"] = data["compute_units"][0]["peak_gops"]["fp32"]
    path = tmp_path / "pi5-no-int8.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.onnxruntime
@pytest.mark.parametrize("native_fp16, written", [(True, "fp16"), (False, "fp32")])
def test_no_int8_holds_so_the_best_native_float_is_written_and_labelled(int8_never_holds, mnist_model, mnist_calib,
                                                                         mnist_test, tmp_path, native_fp16, written):
    from edgeopt.convert import convert

    said: list[str] = []
    res = convert(mnist_model, str(_arm_profile(tmp_path, native_fp16=native_fp16)), tmp_path / "out",
                  precision="int8", calib=mnist_calib, eval=mnist_test, max_accuracy_drop=2, on_warning=said.append)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["precision"] == res.manifest.precision == written
    assert manifest["precision_fallback"]["requested"] == "int8"
    assert "INT8 misses" in manifest["precision_fallback"]["reason"]
    assert any("no INT8 held the bound" in s and f"trying {written.upper()}" in s for s in said)
    gates = res.validation.gates
    assert gates and all(g.passed for g in gates.values()), gates  # it holds what the INT8 builds missed


@pytest.mark.onnxruntime
def test_no_fallback_keeps_the_int8_gate_failure_and_writes_nothing(int8_never_holds, mnist_model, tmp_path):
    from edgeopt.convert import convert

    with pytest.raises(GateFailedError, match="INT8 misses"):
        convert(mnist_model, str(_arm_profile(tmp_path, native_fp16=True)), tmp_path / "out", precision="int8",
                fallback=False)
    assert not (tmp_path / "out").exists()


@pytest.mark.onnxruntime
def test_inspect_shows_the_precision_written_and_why(int8_never_holds, mnist_model, mnist_calib, mnist_test, tmp_path,
                                                      cli):
    from edgeopt.convert import convert

    convert(mnist_model, str(_arm_profile(tmp_path, native_fp16=False)), tmp_path / "out", precision="int8",
            calib=mnist_calib, eval=mnist_test, max_accuracy_drop=2)
    shown = cli("inspect", tmp_path / "out")
    assert shown.returncode == 0, shown.stderr
    assert "FP32, not INT8: no INT8 held the bound" in shown.stdout and "INT8 misses" in shown.stdout
