"""A profile outside the ARM boards' rule (host, x86-avx512) keeps its first backend when that one only misses the
bound, but when its converter fails on the model (a crash inside the quantizer: exit 3) the next installed backend
of the profile builds it, and the manifest says which backend was left and why."""

from __future__ import annotations

import pytest
import yaml

from edgeopt.converters.base import Backend, ChainContext, ChainOptions, Intermediate, StageConfig
from edgeopt.enums import Precision
from edgeopt.errors import GateFailedError, StageError

CRASH = "crashes-on-model"  # a backend made for this test: its converter always fails on the model
MISS = "misses-the-bound"  # and one whose build always misses the bound


class _Config(StageConfig):
    pass


class CrashingBackend(Backend):
    name = CRASH
    Config = _Config
    precisions = (Precision.FP32, Precision.INT8)
    requires = ("onnx",)

    @classmethod
    def configure(cls, options: ChainOptions) -> _Config:
        return _Config()

    def run(self, model: Intermediate, config: _Config, ctx: ChainContext) -> Intermediate:
        raise StageError(f"{CRASH}: INT8 quantization failed: ValueError: operands could not be broadcast together",
                         "try another backend")


class MissingBackend(CrashingBackend):
    name = MISS

    def run(self, model: Intermediate, config: _Config, ctx: ChainContext) -> Intermediate:
        raise GateFailedError(f"{MISS}: INT8 misses --max-accuracy-drop 1")


BACKENDS = {CRASH: CrashingBackend, MISS: MissingBackend}


def _x86_profile(tmp_path, first: str):
    from importlib.resources import files

    data = yaml.safe_load((files("edgeopt.device_profiles") / "x86-avx512.yaml").read_text())
    for key in ("aliases", "family", "family_default"):
        data.pop(key, None)
    data["name"] = "x86-crash"
    data["backends"] = [{"name": first, "unit": "cpu"},
                        {"name": "onnxruntime", "unit": "cpu", "settings": {"threads": 2}}]
    path = tmp_path / "x86-crash.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture
def fake(request, monkeypatch):
    """The backend named by the test's parameter, registered from a module of its own (``BACKEND``)."""
    import sys
    import types

    from edgeopt.converters.registry import register_backend, unregister_backend

    name = request.param
    module = types.ModuleType(f"_edgeopt_test_{name.replace('-', '_')}")
    module.BACKEND = BACKENDS[name]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    register_backend(name, module.__name__)
    yield name
    unregister_backend(name)


@pytest.mark.parametrize("fake", [CRASH], indirect=True)
def test_the_next_backend_builds_it_when_the_first_converter_fails_on_the_model(fake, mnist_model, tmp_path):
    from edgeopt.backend_fallback import backend_order
    from edgeopt.convert import convert

    profile = _x86_profile(tmp_path, fake)
    assert backend_order(str(profile)) == []  # not the ARM boards' rule: only a converter failure moves on
    said: list[str] = []
    res = convert(mnist_model, str(profile), tmp_path / "out", precision="fp32", on_warning=said.append)
    assert res.manifest.backend == "onnxruntime"
    left = res.manifest.backend_fallback
    assert [e.backend for e in left] == [CRASH] and left[0].exit_code == 3 and "broadcast" in left[0].reason
    assert any(f"{CRASH} could not hold this model" in s and "trying onnxruntime" in s for s in said)


@pytest.mark.parametrize("fake", [MISS], indirect=True)
def test_a_first_backend_that_misses_the_bound_is_not_replaced_on_x86(fake, mnist_model, tmp_path):
    from edgeopt.convert import convert

    with pytest.raises(GateFailedError):
        convert(mnist_model, str(_x86_profile(tmp_path, fake)), tmp_path / "out", precision="fp32")
    assert not (tmp_path / "out").exists()
