"""One count of quantized units: each backend's quantizer reports :func:`edgeopt.quant_units.units_of` of what
it wrote, the count the validation's INT8 gate reads from the artifact; an in-memory OpenVINO model counts as
its IR does.

Model and data: the MNIST CNN fixture and its real calibration digits."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgeopt.converters.quantize.modes import DynamicMode, StaticMode, WeightsMode
from edgeopt.data import Dataset
from edgeopt.quant_units import count_units, units_of

REPO = Path(__file__).resolve().parents[2]
MNIST = REPO / "fixtures" / "models" / "mnist_cnn.onnx"


def calib(n: int = 16) -> Dataset:
    x = np.load(REPO / "fixtures" / "data" / "mnist_calib.npz")["input"][:n]
    return Dataset({"input": x}, ranks={"input": 4})


@pytest.mark.onnxruntime
def test_qdq_quantizer_reports_the_one_count(tmp_path):
    from edgeopt.converters.quantize import qdq_quantizer
    from edgeopt.converters.quantize.qdq_quantizer import QdqQuantizer

    assert not hasattr(qdq_quantizer, "count_units")
    for mode in (StaticMode(), DynamicMode()):
        q = QdqQuantizer().quantize(MNIST, mode, tmp_path / f"{mode.kind.value}.onnx", calib=calib())
        counted = count_units(tmp_path, {"model": q.path.name})
        assert (q.quantized_units, q.float_units) == units_of(q.path) == (counted["quantized"], counted["float"])
    assert units_of(tmp_path / "static.onnx") == (5, 0)  # its 3 convs and 2 gemms
    assert units_of(MNIST) == (0, 5)


@pytest.mark.slow
@pytest.mark.openvino
def test_openvino_quantizer_counts_its_in_memory_model_as_its_ir(tmp_path):
    from edgeopt.converters.backends.openvino import quantizer
    from edgeopt.converters.backends.openvino.quantizer import OpenVINOQuantizer, read_model

    assert not hasattr(quantizer, "count_units")
    for mode in (WeightsMode(), StaticMode()):
        q = OpenVINOQuantizer().quantize(MNIST, mode, tmp_path / f"{mode.kind.value}.xml", calib=calib())
        in_memory = OpenVINOQuantizer.quantize_model(read_model(MNIST), mode, calib=calib())
        assert (q.quantized_units, q.float_units) == units_of(q.path) == units_of(in_memory) == (5, 0)
    assert units_of(read_model(MNIST)) == (0, 5)
