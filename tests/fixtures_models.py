"""Session fixtures for the small real models and data of ``fixtures/`` (auto-loaded by conftest.py).

Paths only: tests open them with whatever they test. Generated fixtures are built once into
``fixtures/.cache/``; real-model fixtures skip (with the reason) when their package is not installed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import fixtures
from fixtures import FixtureMissing


@pytest.fixture(scope="session")
def digits_model() -> Path:
    return fixtures.fixture_model("digits_cnn")


@pytest.fixture(scope="session")
def mnist_model() -> Path:
    return fixtures.fixture_model("mnist_cnn")


@pytest.fixture(scope="session")
def mobilenet_model() -> Path:
    """MobileNetV2-like, 224×224, width 0.5, 1000 classes, random weights (generated, ~8 MB)."""
    return fixtures.fixture_model("mobilenet")


@pytest.fixture(scope="session")
def mobilenet_tiny_model() -> Path:
    """MobileNetV2-like, 32×32, 10 classes, < 1 MFLOP, random weights: for emulation and remote tests.
    (Not named ``tiny_model``: tests/fixtures_convert.py has a function-scoped fixture of that name.)"""
    return fixtures.fixture_model("mobilenet_tiny")


@pytest.fixture(scope="session")
def digits_calib() -> Path:
    return fixtures.fixture_data("digits_calib")


@pytest.fixture(scope="session")
def digits_test() -> Path:
    return fixtures.fixture_data("digits_test")


@pytest.fixture(scope="session")
def mnist_calib() -> Path:
    return fixtures.fixture_data("mnist_calib")


@pytest.fixture(scope="session")
def mnist_test() -> Path:
    return fixtures.fixture_data("mnist_test")


@pytest.fixture(scope="session")
def real_model():
    """``real_model("rapidocr_cls")`` -> Path; skips the test when the package is not installed."""

    def get(name: str) -> Path:
        try:
            return fixtures.real_model(name)
        except FixtureMissing as err:
            pytest.skip(err.one_line())

    return get


@pytest.fixture(scope="session")
def eval_data():
    """``eval_data("text_lines")`` -> .npz Path (fixtures/datasets.py); skips when a tool it needs is missing."""

    def get(name: str) -> Path:
        try:
            return fixtures.fixture_data(name)
        except FixtureMissing as err:
            pytest.skip(err.one_line())

    return get


def digits_datasets():
    """(calib, test) Datasets of the digits CNN's committed data, for tests that drive a stage directly."""
    from edgeopt.data import load_npz

    data = Path(fixtures.__file__).parent / "data"
    if not (data / "digits_calib.npz").is_file():
        pytest.skip("fixtures/data/digits_*.npz missing (python fixtures/train_small_cnn.py)")
    calib, test = load_npz(data / "digits_calib.npz"), load_npz(data / "digits_test.npz")
    calib.ranks = test.ranks = {"input": 4}
    return calib, test


def weight_outlier_mlp(path: Path, seed: int = 0, positions: int = 8) -> np.ndarray:
    """x[1,T,16] -> fcA -> relu -> fcB -> relu -> fcC -> logits[1,T,10], where INT8 *weights* break the model and
    no activation quantizer does: fcA's output channel 0 is always 0 (a dead channel), and every output channel
    of fcB holds one weight 1000x larger on that dead input. Per-channel INT8 of fcB's weights takes its scale
    from that weight and rounds every weight that matters to 0; in float the dead input makes it harmless.
    Only fcB's weights back in float (NNCF ``ignored_scope``) recover it. Returns the cluster prototypes."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    wa = (rng.standard_normal((16, 32)) / 4).astype(np.float32)
    wa[:, 0] = 0.0
    wb = (rng.standard_normal((32, 32)) / np.sqrt(32)).astype(np.float32)
    wb[0, :] = 1000.0 * np.abs(wb).max()
    protos = (rng.standard_normal((10, 16)) * 2).astype(np.float32)
    c = rng.integers(0, 10, 2000)
    h = protos[c] + 0.3 * rng.standard_normal((2000, 16)).astype(np.float32)
    h = np.maximum(np.maximum(h @ wa, 0) @ wb, 0)
    wc = np.linalg.lstsq(h, 10.0 * np.eye(10)[c], rcond=None)[0].astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "wA"], ["mmA"], name="fcA"),
             helper.make_node("Relu", ["mmA"], ["hA"], name="reluA"),
             helper.make_node("MatMul", ["hA", "wB"], ["mmB"], name="fcB"),
             helper.make_node("Relu", ["mmB"], ["hB"], name="reluB"),
             helper.make_node("MatMul", ["hB", "wC"], ["logits"], name="fcC")]
    g = helper.make_graph(nodes, "weight_outlier",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, positions, 16])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, positions, 10])],
                          [numpy_helper.from_array(w, f"w{n}") for w, n in zip((wa, wb, wc), "ABC", strict=True)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return protos


def outlier_mlp(path: Path, seed: int = 0, positions: int | None = None) -> np.ndarray:
    """x -> fcA -> relu -> fcB -> relu -> fcC -> relu -> fcD -> logits (10 classes), a least-squares classifier of
    10 clusters; fcB makes 2 channels ~3000x larger than the rest, so per-tensor INT8 of its output wipes out the
    small channels the classifier depends on. ``positions``: x[1,T,16] -> logits[1,T,10], the same MLP at every
    position (as a recogniser's head is); else x[1,16] -> logits[1,10]. Returns the cluster prototypes (labels
    by construction)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    dims = [16, 32, 64, 32]
    ws = [(rng.standard_normal((a, b)) / np.sqrt(a)).astype(np.float32) for a, b in zip(dims, dims[1:], strict=False)]
    ws[1][:, :2] *= 3000.0
    ws[2][:2, :] *= 1e-4
    protos = (rng.standard_normal((10, 16)) * 2).astype(np.float32)
    c = rng.integers(0, 10, 2000)
    h = protos[c] + 0.3 * rng.standard_normal((2000, 16)).astype(np.float32)
    for w in ws:
        h = np.maximum(h @ w, 0)
    ws.append(np.linalg.lstsq(h, 10.0 * np.eye(10)[c], rcond=None)[0].astype(np.float32))
    nodes, t = [], "x"
    for name in "ABCD":
        nodes.append(helper.make_node("MatMul", [t, f"w{name}"], [f"mm{name}"], name=f"fc{name}"))
        t = f"mm{name}"
        if name != "D":
            nodes.append(helper.make_node("Relu", [t], [f"h{name}"], name=f"relu{name}"))
            t = f"h{name}"
    nodes[-1].output[0] = "logits"
    lead = [1, positions] if positions else [1]
    g = helper.make_graph(nodes, "tagger" if positions else "outlier",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [*lead, 16])],
                          [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [*lead, 10])],
                          [numpy_helper.from_array(w, f"w{n}") for w, n in zip(ws, "ABCD", strict=True)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return protos
