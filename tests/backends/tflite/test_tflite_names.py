"""Node names TensorFlow refuses as scopes (``Softmax@0``, as PaddlePaddle's exporter writes them) are made safe
before onnx2tf, and such a model converts and matches ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tflite


def _softmax_model(path):
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    w = nh.from_array(np.random.default_rng(0).normal(0, 0.5, (16, 4)).astype(np.float32), "w")
    nodes = [h.make_node("MatMul", ["x", "w"], ["m"], name="MatMul@0"),
             h.make_node("Softmax", ["m"], ["y"], axis=1, name="Softmax@0"),
             h.make_node("Identity", ["y"], ["out"], name="Softmax_0")]  # the safe name is taken: a suffix
    graph = h.make_graph(nodes, "sm", [h.make_tensor_value_info("x", T.FLOAT, [1, 16])],
                         [h.make_tensor_value_info("out", T.FLOAT, [1, 4])], [w])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 11)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def test_invalid_scope_characters_become_underscores_and_names_stay_unique(tmp_path):
    import onnx

    from edgeopt.converters.backends.tflite.names import scope_safe_node_names

    proto = onnx.load(str(_softmax_model(tmp_path / "m.onnx")))
    assert scope_safe_node_names(proto) == 2
    names = [n.name for n in proto.graph.node]
    assert names == ["MatMul_0", "Softmax_0_1", "Softmax_0"] and len(set(names)) == 3
    assert [o.name for o in proto.graph.output] == ["out"]  # tensor names are kept
    assert scope_safe_node_names(proto) == 0


@pytest.mark.slow
def test_a_softmax_named_with_an_at_sign_converts_to_tflite(tmp_path, cli):
    import onnxruntime as ort

    from edgeopt.runtime.runners import open_runner

    model = _softmax_model(tmp_path / "model.onnx")
    out = tmp_path / "art"
    proc = cli("convert", str(model), "--backend", "tflite", "--precision", "fp32", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    x = np.random.default_rng(1).normal(size=(1, 16)).astype(np.float32)
    ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with open_runner(str(out)) as runner:
        got = next(iter(runner.run({"x": x}).values()))
    np.testing.assert_allclose(got, ref, atol=1e-5)
