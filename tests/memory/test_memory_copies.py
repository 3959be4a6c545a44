"""The runtime's share that grows with the model: constants folded at load counted as weights (not activations),
and ONNX Runtime's copies of the weights (transient copies while its graph is optimized, the NCHWc copies of Conv weights, its second arena block)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from edgeopt.memory.facts import facts_of
from edgeopt.memory.predict import predict_memory


def _conv_model(folded: bool) -> onnx.ModelProto:
    """input [1,8,16,16] -> Conv(16 x 8 x 3 x 3) -> Relu; the weight as an initializer, or made at load by
    ConstantOfShape from a stored shape (as in onnx's light models)."""
    if folded:
        shape = numpy_helper.from_array(np.array([16, 8, 3, 3], dtype=np.int64), "w_shape")
        inits = [shape]
        pre = [helper.make_node("ConstantOfShape", ["w_shape"], ["w"],
                                value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.1]))]
    else:
        inits = [numpy_helper.from_array(np.full((16, 8, 3, 3), 0.1, np.float32), "w")]
        pre = []
    nodes = pre + [helper.make_node("Conv", ["input", "w"], ["c"], pads=[1, 1, 1, 1]),
                   helper.make_node("Relu", ["c"], ["out"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 8, 16, 16])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 16, 16, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


W = 16 * 8 * 3 * 3 * 4


def test_a_weight_made_by_a_constant_node_is_a_weight_not_an_activation():
    stored, folded = (predict_memory(_conv_model(f), "openvino", "fp32") for f in (False, True))
    assert stored.weights_bytes == folded.weights_bytes == W
    assert folded.arena_bytes == stored.arena_bytes  # the made weight takes no room in the arena


def test_onnx_runtime_holds_copies_of_the_weights_that_grow_with_the_model():
    c = facts_of("onnxruntime")["copies"]
    stored, folded = (predict_memory(_conv_model(f), "onnxruntime", "fp32") for f in (False, True))
    arena = c["arena"] * stored.arena_bytes  # the memory pattern's block beside the first run's arena
    assert stored.runtime_copies_bytes == int(c["kept"] * W + c["conv"] * W + arena)
    # a weight made at load is copied as a stored one is: the parsed file is not held beside the session's tensors
    assert folded.runtime_copies_bytes == stored.runtime_copies_bytes
    assert stored.runtime_bytes == facts_of("onnxruntime")["bytes"] + stored.runtime_copies_bytes
    assert stored.total_bytes == stored.weights_bytes + stored.arena_bytes + stored.runtime_bytes
    assert predict_memory(_conv_model(False), "openvino", "fp32").runtime_copies_bytes == int(
        facts_of("openvino")["copies"]["kept"] * W)
    assert predict_memory(_conv_model(False), "tvm", "fp32").runtime_copies_bytes == 0  # none measured there
    litert = predict_memory(_conv_model(True), "tflite", "fp32")  # the .tflite stores what ONNX made at load
    assert litert.runtime_copies_bytes == int(facts_of("tflite")["copies"]["kept"] * W)
    int8 = predict_memory(_conv_model(False), "onnxruntime", "int8")
    assert int8.runtime_copies_bytes < stored.runtime_copies_bytes  # the copies are of INT8 weights


def _twin_convs(same: bool) -> onnx.ModelProto:
    """input [1,8,16,16] -> Conv -> Conv, both 8 x 8 x 3 x 3, their weights made by ConstantOfShape of one shape,
    filled with the same value or with two."""
    shape = numpy_helper.from_array(np.array([8, 8, 3, 3], dtype=np.int64), "w_shape")
    fills = (0.1, 0.1) if same else (0.1, 0.2)
    nodes = [helper.make_node("ConstantOfShape", ["w_shape"], [f"w{k}"],
                              value=helper.make_tensor("v", TensorProto.FLOAT, [1], [v])) for k, v in enumerate(fills)]
    nodes += [helper.make_node("Conv", ["input", "w0"], ["c0"], pads=[1, 1, 1, 1]),
              helper.make_node("Conv", ["c0", "w1"], ["out"], pads=[1, 1, 1, 1])]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 8, 16, 16]) for n in ("input", "out")]
    graph = helper.make_graph(nodes, "twins", io[:1], io[1:], [shape])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_openvino_holds_identical_constants_once_and_its_kernels_copy_each():
    w = 8 * 8 * 3 * 3 * 4
    same, differ = (predict_memory(_twin_convs(s), "openvino", "fp32") for s in (True, False))
    assert same.weights_bytes == w and differ.weights_bytes == 2 * w  # the IR's .bin stores one blob of the twins
    assert same.runtime_copies_bytes == differ.runtime_copies_bytes == int(
        facts_of("openvino")["copies"]["kept"] * 2 * w)  # each conv's kernel copies its weights
    ort = predict_memory(_twin_convs(True), "onnxruntime", "fp32")
    assert ort.weights_bytes == 2 * w  # ONNX Runtime keeps each initializer of its own


def test_constant_keys_group_equal_bytes_and_the_same_op_on_equal_constants():
    from edgeopt.memory.constants import constant_keys, distinct

    model = _twin_convs(True)
    extra = [numpy_helper.from_array(np.full((4,), 0.5, np.float32), n) for n in ("a", "b")]
    extra.append(numpy_helper.from_array(np.full((4,), 0.25, np.float32), "c"))
    model.graph.initializer.extend(extra)
    keys = constant_keys(model.graph, {"w_shape", "w0", "w1", "a", "b", "c"})
    assert keys["w0"] == keys["w1"] and keys["a"] == keys["b"] != keys["c"]
    assert distinct({"w0", "w1", "a", "b", "c"}, keys) == {"w0", "a", "c"}
    assert constant_keys(_twin_convs(False).graph, {"w_shape", "w0", "w1"})["w0"] != \
        constant_keys(_twin_convs(False).graph, {"w_shape", "w0", "w1"})["w1"]


def test_onnx_runtimes_second_arena_block_takes_a_power_of_two_region_past_the_first():
    from edgeopt.memory.facts import arena_region

    mib = facts_of("onnxruntime")["arena_first_region_bytes"]
    assert arena_region("onnxruntime", 500_000) == 500_000  # within the first region, which the base holds
    assert arena_region("onnxruntime", 5_390_000) == 8 * mib  # BFCArena's kNextPowerOfTwo growth
    assert arena_region("onnxruntime", 8 * mib) == 8 * mib
    assert arena_region("openvino", 5_390_000) == 5_390_000  # no regions measured there
