"""Backends in the profile's order: on an ARM board, when the first backend can't hold the
model (its gate fails, or its converter fails on the model), the profile's next backend is tried, the run says
why on stderr, and the manifest keeps every backend left and why. A backend the user names is never replaced."""

from __future__ import annotations

import yaml

from edgeopt.converters.base import Backend, ChainContext, ChainOptions, Intermediate, StageConfig
from edgeopt.enums import Precision
from edgeopt.errors import GateFailedError

NAME = "never-within-bound"  # a backend made for this test: its build always misses the bound (a named fake)


class NeverConfig(StageConfig):
    pass


class NeverWithinBoundBackend(Backend):
    name = NAME
    Config = NeverConfig
    precisions = (Precision.FP32, Precision.INT8)
    requires = ("onnx",)

    @classmethod
    def configure(cls, options: ChainOptions) -> NeverConfig:
        return NeverConfig()

    def run(self, model: Intermediate, config: NeverConfig, ctx: ChainContext) -> Intermediate:
        raise GateFailedError(f"{NAME}: INT8 misses --max-accuracy-drop 1: best top1 12.00 % vs FP32 97.00 %")


BACKEND = NeverWithinBoundBackend


def _arm_profile(tmp_path, backends: list[dict]):
    from importlib.resources import files

    data = yaml.safe_load((files("edgeopt.device_profiles") / "pi5.yaml").read_text())
    for key in ("aliases", "family", "family_default"):
        data.pop(key, None)
    data["name"] = "pi5-fallback"
    data["backends"] = backends
    path = tmp_path / "pi5-fallback.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _never_backend():
    from edgeopt.converters.registry import register_backend

    return register_backend(NAME, __name__)


def test_the_next_backend_is_tried_when_the_first_misses_the_bound(mnist_model, tmp_path):
    from edgeopt.convert import convert
    from edgeopt.converters.registry import unregister_backend

    _never_backend()
    try:
        profile = _arm_profile(tmp_path, [{"name": NAME, "unit": "cpu"},
                                          {"name": "onnxruntime", "unit": "cpu", "settings": {"threads": 2}}])
        said: list[str] = []
        res = convert(mnist_model, str(profile), tmp_path / "out", precision="fp32", on_warning=said.append)
    finally:
        unregister_backend(NAME)
    assert res.manifest.backend == "onnxruntime"
    left = res.manifest.backend_fallback
    assert [e.backend for e in left] == [NAME] and left[0].exit_code == 5 and "misses" in left[0].reason
    assert any(f"{NAME} could not hold this model" in s and "trying onnxruntime" in s for s in said)
    assert (tmp_path / "out" / "manifest.json").is_file()


def test_a_backend_the_user_names_is_not_replaced(mnist_model, tmp_path):
    import pytest

    from edgeopt.convert import convert
    from edgeopt.converters.registry import unregister_backend

    _never_backend()
    try:
        profile = _arm_profile(tmp_path, [{"name": NAME, "unit": "cpu"}, {"name": "onnxruntime", "unit": "cpu"}])
        with pytest.raises(GateFailedError):
            convert(mnist_model, str(profile), tmp_path / "out", backend=NAME, precision="fp32")
    finally:
        unregister_backend(NAME)
    assert not (tmp_path / "out").exists()


def test_x86_profiles_and_tvm_are_not_fallbacks():
    from edgeopt.backend_fallback import backend_order, fallbacks

    assert backend_order("host") == []  # the x86 profiles keep their one backend (module doc)
    assert [b.value for b in fallbacks(backend_order("pi5"))] == ["onnxruntime", "openvino"]  # TVM untuned never


def test_a_failure_the_pruning_caused_is_not_retried_on_another_backend():
    """The same pruned model misses on every backend: the error names the flag that turns the pruning off."""
    from edgeopt.backend_fallback import another_backend_may_hold

    pruned = GateFailedError("qdq: INT8 misses …; the loss comes from the pruning stage: …",
                             details={"pruning": {"drop": 20.0, "main_cause": True}})
    minor = GateFailedError("qdq: INT8 misses …; … not the main cause", details={"pruning": {"drop": 0.1}})
    assert not another_backend_may_hold(pruned)
    assert another_backend_may_hold(minor) and another_backend_may_hold(GateFailedError("misses"))
