"""Session fixtures for the small real models and data of ``fixtures/`` (auto-loaded by conftest.py).

Paths only: tests open them with whatever they test. Generated fixtures are built once into
``fixtures/.cache/``; real-model fixtures skip (with the reason) when their package is not installed.
"""

from __future__ import annotations

from pathlib import Path

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
