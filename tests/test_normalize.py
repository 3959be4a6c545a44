"""The normalize stage: BN folding, output names kept, static shapes, NaN weights refused."""

from __future__ import annotations

import onnx
import pytest
from fixtures_convert import conv_bn_model

from edgeopt.converters.base import ChainContext, ChainOptions, Intermediate, StageRecord
from edgeopt.converters.normalize import Normalize, NormalizeConfig, count_ops, restore_output_names
from edgeopt.enums import BackendName, Precision
from edgeopt.errors import BadModelError, ExitCode


def _run(path, tmp_path, **config):
    ctx = ChainContext(profile=None, work_dir=tmp_path, artifact_dir=tmp_path, reference_model=path,
                       record=StageRecord("normalize", {}))
    out = Normalize().run(Intermediate(path), NormalizeConfig(**config), ctx)
    return out, ctx


def test_folds_batchnorm_and_keeps_output_names(tmp_path):
    src = conv_bn_model(tmp_path / "m.onnx", batch=1)
    assert count_ops(onnx.load(str(src)), "BatchNormalization") == 1
    out, ctx = _run(src, tmp_path)
    model = onnx.load(str(out.path))
    assert count_ops(model, "BatchNormalization") == 0
    assert [o.name for o in model.graph.output] == ["logits"]
    assert ctx.record.report["batchnorm_before"] == 1 and ctx.record.report["batchnorm_after"] == 0
    assert ctx.record.checks["cosine_min"] >= 0.9999 and ctx.record.checks["samples"] > 0


def test_fixes_dynamic_dims_with_input_shapes(tmp_path):
    src = conv_bn_model(tmp_path / "m.onnx", batch="N")
    out, _ = _run(src, tmp_path, input_shapes={"x": (2, 3, 8, 8)})
    model = onnx.load(str(out.path))
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    assert dims == [2, 3, 8, 8]
    assert [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim] == [2, 5]


def test_dynamic_dims_without_input_shapes_exit_3(tmp_path):
    src = conv_bn_model(tmp_path / "m.onnx", batch="N")
    with pytest.raises(BadModelError) as e:
        _run(src, tmp_path)
    assert e.value.exit_code == ExitCode.BAD_INPUT
    assert "--input-shape x=1x3x8x8" in e.value.hint


def test_nan_in_weights_names_the_initializer(tmp_path):
    src = conv_bn_model(tmp_path / "m.onnx", batch=1, nan_weight=True)
    with pytest.raises(BadModelError) as e:
        _run(src, tmp_path)
    assert e.value.exit_code == ExitCode.BAD_INPUT and "conv_w" in e.value.message and "NaN" in e.value.message


def test_restore_output_names_renames_back(tmp_path):
    model = onnx.load(str(conv_bn_model(tmp_path / "m.onnx", batch=1)))
    model.graph.node[-1].output[0] = "renamed"
    model.graph.output[0].name = "renamed"
    restore_output_names(model, ["logits"])
    assert model.graph.output[0].name == "logits" and model.graph.node[-1].output[0] == "logits"


def test_configure_takes_input_shapes_from_options():
    opts = ChainOptions(backend=BackendName.ONNXRUNTIME, precision=Precision.FP32, input_shapes={"x": (1, 3, 8, 8)})
    assert Normalize.configure(opts).input_shapes == {"x": (1, 3, 8, 8)}


def test_old_opset_ir3_model_is_upgraded_and_folds(tmp_path):
    """An opset-9, IR-3 model (initializers listed as graph inputs, like onnx's light_* models)
    used to come out of folding invalid; normalize now upgrades it to opset 13 / IR 7 first."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    scale, bias, mean = (numpy_helper.from_array(a.astype(np.float32), n) for a, n in
                         ((rng.uniform(0.5, 1.5, 4), "s"), (rng.standard_normal(4), "b"), (rng.standard_normal(4), "m")))
    var = numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "v")
    inits = [w, scale, bias, mean, var]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["y"])],
        "old", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
        + [helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims)) for t in inits],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    model.ir_version = 3
    src = tmp_path / "old.onnx"
    onnx.save(model, str(src))
    out, ctx = _run(src, tmp_path)
    new = onnx.load(str(out.path))
    onnx.checker.check_model(new)
    assert next(i.version for i in new.opset_import if i.domain == "") >= 13 and new.ir_version >= 7
    assert ctx.record.report["upgraded"]["opset_from"] == 9
    assert count_ops(new, "BatchNormalization") == 0
    assert ctx.record.checks["cosine_min"] >= 0.9999
