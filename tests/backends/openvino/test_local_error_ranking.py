"""The OpenVINO search's per-unit error ranking reads each quantizer's input and output by the tensors they are,
also when one of them already is a model output (a detector's head: ``add_outputs`` adds nothing for it)."""

import numpy as np
import pytest

pytestmark = [pytest.mark.openvino]


def _model_with_output_into_quantizer():
    ov = pytest.importorskip("openvino")
    from openvino import opset13 as op

    def fq(x, lo, hi):
        c = [op.constant(np.array(v, np.float32)) for v in (lo, hi, lo, hi)]
        return op.fake_quantize(x, *c, 256)

    rng = np.random.default_rng(0)
    x = op.parameter([1, 4, 8, 8], np.float32, name="x")
    h = op.relu(x)  # a model output that also feeds a quantizer
    w = op.constant(rng.normal(size=(4, 4, 1, 1)).astype(np.float32))
    a = op.convolution(fq(h, 0.0, 3.0), w, [1, 1], [0, 0], [0, 0], [1, 1])
    pooled = op.max_pool(h, [2, 2], [1, 1], [0, 0], [0, 0], [2, 2]).output(0)
    b = op.convolution(fq(pooled, 0.0, 3.0), w, [1, 1], [0, 0], [0, 0], [1, 1])
    return ov, ov.Model([h, a, b], [x], "head")


def test_ranking_reads_each_quantizer_by_its_tensors_when_one_is_already_an_output():
    ov, model = _model_with_output_into_quantizer()
    from edgeopt.converters.backends.openvino.units import FloatUnits, local_error_ranking, result_slots

    feeds = [{"x": np.random.default_rng(i).normal(size=(1, 4, 8, 8)).astype(np.float32)} for i in range(2)]
    ranked = local_error_ranking(FloatUnits(model, model), feeds, ["x"], ov.Core(), 1)
    assert len(ranked) == 2 and all(np.isfinite(e) and e >= 0 for _, e in ranked)
    assert len(set(result_slots(model).values())) == len(model.get_results())
