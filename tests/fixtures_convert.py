"""Fixtures for the converter chain tests: tiny ONNX models built with onnx.helper, data, profiles."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

DIGITS = Path(__file__).resolve().parent.parent / "fixtures" / "models" / "digits_cnn.onnx"


def make_ort_artifact(directory: Path, accuracy: float | None = 99.44) -> Path:
    """A minimal ONNX Runtime artifact around the committed digits CNN, written without the converter."""
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(DIGITS, directory / "model.onnx")
    manifest = {
        "backend": "onnxruntime", "precision": "fp32", "profile": "host",
        "source_model": {"path": str(DIGITS), "sha256": "-"},
        "inputs": [{"name": "input", "shape": [1, 1, 8, 8], "dtype": "float32"}],
        "outputs": [{"name": "logits", "shape": [1, 10], "dtype": "float32"}],
        "runtime": {"backend": "onnxruntime", "model": "model.onnx", "settings": {}},
        "validation": {"accuracy": accuracy} if accuracy is not None else None,
        "versions": {"edgeopt": "0", "numpy": "-", "onnx": "-", "onnxruntime": "-"},  # what the build had
    }
    (directory / "manifest.json").write_text(json.dumps(manifest))
    return directory


def make_openvino_artifact(directory: Path) -> Path:
    """The digits CNN as an OpenVINO FP32 artifact (f32 inference), written without the converter."""
    import openvino as ov

    art = make_ort_artifact(directory)
    ov.save_model(ov.convert_model(str(art / "model.onnx")), str(art / "model.xml"), compress_to_fp16=False)
    manifest = json.loads((art / "manifest.json").read_text())
    manifest["backend"] = "openvino"
    manifest["runtime"] = {"backend": "openvino", "model": "model.xml", "settings": {"inference_precision": "f32"}}
    (art / "manifest.json").write_text(json.dumps(manifest))
    return art


PROFILE = {
    "name": "testdev",
    "description": "a test device with ONNX Runtime only",
    "arch": "x86_64",
    "compute_units": [{"kind": "cpu", "name": "test cpu", "cores": 2, "clock_ghz": 2.0,
                       "peak_gops": {"fp32": 64.0, "int8": 256.0}}],
    "memory": {"size_gb": 4, "bandwidth_gbps": 10},
    "tdp_w": 10,
    "backends": [{"name": "onnxruntime", "settings": {"provider": "CPUExecutionProvider", "threads": 1}}],
    "default_chain": {"precision": "fp32"},
    "sources": {"tdp_w": {"kind": "estimate", "ref": "test"}},
}


def write_profile(directory: Path, **changes) -> Path:
    data = {**PROFILE, **changes}
    p = directory / f"{data['name']}.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def conv_bn_model(path: Path, *, batch="N", nan_weight: bool = False, classes: int = 5) -> Path:
    """x[N,3,8,8] -> Conv -> BatchNorm -> Relu -> GlobalAveragePool -> Flatten -> Gemm -> logits[N,classes]."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    w = rng.normal(size=(4, 3, 3, 3)).astype(np.float32)
    if nan_weight:
        w[0, 0, 0, 0] = np.nan
    arrays = {"conv_w": w, "bn_scale": rng.uniform(0.5, 1.5, 4), "bn_bias": rng.normal(size=4),
              "bn_mean": rng.normal(size=4) * 0.1, "bn_var": rng.uniform(0.5, 1.5, 4),
              "fc_w": rng.normal(size=(classes, 4)), "fc_b": rng.normal(size=classes)}
    inits = [nh.from_array(np.asarray(a, np.float32), n) for n, a in arrays.items()]
    nodes = [
        h.make_node("Conv", ["x", "conv_w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        h.make_node("BatchNormalization", ["c", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["bn"], name="bn"),
        h.make_node("Relu", ["bn"], ["r"], name="relu"),
        h.make_node("GlobalAveragePool", ["r"], ["gap"], name="gap"),
        h.make_node("Flatten", ["gap"], ["flat"], name="flat"),
        h.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1, name="fc"),
    ]
    graph = h.make_graph(nodes, "tiny", [h.make_tensor_value_info("x", T.FLOAT, [batch, 3, 8, 8])],
                         [h.make_tensor_value_info("logits", T.FLOAT, [batch, classes])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def reference_labels(model_path: Path, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    return np.concatenate([np.argmax(sess.run(None, {"x": x[i:i + 1]})[0], -1) for i in range(len(x))]).astype(np.int64)


@pytest.fixture
def tiny_model(tmp_path) -> Path:
    return conv_bn_model(tmp_path / "tiny.onnx", batch=1)


@pytest.fixture
def test_profile(tmp_path) -> Path:
    d = tmp_path / "profiles"
    d.mkdir()
    return write_profile(d)


@pytest.fixture
def tiny_data(tmp_path, tiny_model) -> Path:
    """20 samples [20,1,3,8,8]... stored as [20,3,8,8] (model rank: one sample each), labels = FP32 argmax."""
    x = np.random.default_rng(1).random((20, 3, 8, 8)).astype(np.float32)
    p = tmp_path / "data.npz"
    np.savez(p, x=x, labels=reference_labels(tiny_model, x))
    return p


SHIM = '''
import os, sys
_BLOCK = set(os.environ.get("EDGEOPT_SIMULATE_MISSING", "").split(","))


class _SimulatedMissing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in _BLOCK:
            raise ModuleNotFoundError(f"No module named '{name}' (simulated)", name=name)
        return None


sys.meta_path.insert(0, _SimulatedMissing())
'''


@pytest.fixture
def simulate_missing(tmp_path):
    """Env for a subprocess in which the named modules fail to import (a sitecustomize shim)."""
    shim = tmp_path / "shim"
    shim.mkdir()
    (shim / "sitecustomize.py").write_text(SHIM)

    def env(*modules: str) -> dict:
        import os

        return {"PYTHONPATH": os.pathsep.join([str(shim), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
                "EDGEOPT_SIMULATE_MISSING": ",".join(modules)}

    return env
