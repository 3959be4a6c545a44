"""LayerNormalization with a [1, C] scale and bias (as some exports write it) converts through onnx2tf: the
parameters are given to it as [C], and the .tflite matches ONNX Runtime."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.tflite


def _layernorm_model(path, c: int = 16, shared: bool = False):
    import onnx
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    scale = nh.from_array(rng.uniform(0.5, 1.5, (1, c)).astype(np.float32), "scale")
    bias = nh.from_array(rng.normal(0, 0.1, (1, c)).astype(np.float32), "bias")
    w = nh.from_array(rng.normal(0, 0.3, (c, c)).astype(np.float32), "w")
    nodes = [h.make_node("MatMul", ["x", "w"], ["m"]),
             h.make_node("LayerNormalization", ["m", "scale", "bias"], ["y"], axis=-1, epsilon=1e-5)]
    outs = [h.make_tensor_value_info("y", T.FLOAT, [1, 8, c])]
    if shared:  # another node reads the same scale: it keeps [1, C]
        nodes.append(h.make_node("Mul", ["y", "scale"], ["z"]))
        outs.append(h.make_tensor_value_info("z", T.FLOAT, [1, 8, c]))
    graph = h.make_graph(nodes, "ln", [h.make_tensor_value_info("x", T.FLOAT, [1, 8, c])], outs, [scale, bias, w])
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def test_layernorm_params_reshaped_to_c_and_shared_ones_copied(tmp_path):
    import onnx
    import onnxruntime as ort

    from edgeopt.converters.backends.tflite.layernorm import flatten_layernorm_params

    path = _layernorm_model(tmp_path / "m.onnx", shared=True)
    proto = onnx.load(str(path))
    assert flatten_layernorm_params(proto) == 2
    dims = {i.name: list(i.dims) for i in proto.graph.initializer}
    ln = next(n for n in proto.graph.node if n.op_type == "LayerNormalization")
    assert dims[ln.input[1]] == [16] and dims[ln.input[2]] == [16] and dims["scale"] == [1, 16]
    x = np.random.default_rng(1).normal(size=(1, 8, 16)).astype(np.float32)
    onnx.save(proto, str(tmp_path / "flat.onnx"))
    before = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    after = ort.InferenceSession(str(tmp_path / "flat.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow
def test_layernorm_with_1xc_scale_converts_to_tflite(tmp_path, cli):
    import onnxruntime as ort

    from edgeopt.runtime.runners import open_runner

    model = _layernorm_model(tmp_path / "model.onnx")
    out = tmp_path / "art"
    proc = cli("convert", str(model), "--backend", "tflite", "--precision", "fp32", "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    x = np.random.default_rng(1).normal(size=(1, 8, 16)).astype(np.float32)
    ref = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    with open_runner(str(out)) as runner:
        got = next(iter(runner.run({"x": x}).values()))
    np.testing.assert_allclose(got, ref, atol=1e-4)
