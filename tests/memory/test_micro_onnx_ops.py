"""TFLite Micro's op set checked on the ONNX model, before any conversion: a generated model holding TopK
(onnx2tf makes TOPK_V2, which TFLM lacks) is refused by convert with one line and shown by analyze."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"
DATA = REPO / "fixtures" / "data"


@pytest.fixture
def topk_model(tmp_path) -> Path:
    """input [1,16] -> Relu -> TopK(k=3) values [1,3]."""
    k = helper.make_tensor("k", TensorProto.INT64, [1], [3])
    nodes = [helper.make_node("Relu", ["input"], ["r"]),
             helper.make_node("TopK", ["r", "k"], ["values", "indices"], axis=1)]
    graph = helper.make_graph(nodes, "topk", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("values", TensorProto.FLOAT, [1, 3])], [k])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    path = tmp_path / "topk.onnx"
    onnx.save(model, path)
    return path


def test_onnx_op_tflm_lacks_is_named_with_its_tflite_form_and_alternative(topk_model):
    from edgeopt.converters.backends.tflite.micro.onnx_ops import check_onnx_for_tflm, onnx_ops_tflm_lacks
    from edgeopt.errors import UnsupportedOpError

    assert onnx_ops_tflm_lacks(onnx.load(topk_model)) == [
        {"onnx_op": "TopK", "tflite_op": "TOPK_V2", "alternative": "ARG_MAX for the top class, or top-k in the application"}]
    with pytest.raises(UnsupportedOpError) as err:
        check_onnx_for_tflm(topk_model, "stm32h7")
    assert "'TopK'" in err.value.message and "TOPK_V2" in err.value.message and err.value.exit_code == 3
    assert "ARG_MAX" in err.value.hint


def test_the_op_map_names_only_tflite_ops_tflm_lacks():
    from edgeopt.converters.backends.tflite.micro.onnx_ops import ONNX_TO_TFLITE
    from edgeopt.converters.backends.tflite.micro.ops import TFLM_OPS

    assert not set(ONNX_TO_TFLITE.values()) & TFLM_OPS
    assert onnx_ops_tflm_lacks_of(DIGITS) == []


def onnx_ops_tflm_lacks_of(path):
    from edgeopt.converters.backends.tflite.micro.onnx_ops import onnx_ops_tflm_lacks

    return onnx_ops_tflm_lacks(onnx.load(path))


def test_convert_for_a_microcontroller_refuses_before_converting(topk_model, tmp_path):
    from tests.conftest import run_cli_in_process

    out = tmp_path / "out"
    r = run_cli_in_process("convert", str(topk_model), "--profile", "stm32h7", "--calib",
                           str(DATA / "digits_calib.npz"), "-o", str(out), "--json")
    assert r.returncode == 3, r.stderr
    err = json.loads(r.stdout)["error"] if r.stdout.strip() else {}
    text = json.dumps(err) + r.stderr
    assert "TopK" in text and "TOPK_V2" in text and "nothing was converted" in text
    assert not out.exists() and not list(tmp_path.glob("out.tmp-*"))


def test_analyze_for_a_microcontroller_shows_the_op(topk_model):
    pytest.importorskip("onnx2tf", reason="the tflite extra (onnx2tf) is not installed")
    from tests.conftest import run_cli_in_process

    r = run_cli_in_process("analyze", str(topk_model), "--profile", "stm32h7", "--json")
    assert r.returncode == 0, r.stderr
    issues = json.loads(r.stdout)["analysis"]["preflight"]
    hit = [i for i in issues if i["kind"] == "unsupported_op" and i["backend"] == "tflite"]
    assert hit and hit[0]["ops"] == ["TopK"] and "TOPK_V2" in hit[0]["message"]
