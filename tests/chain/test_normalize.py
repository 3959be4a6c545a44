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
    ctx = ChainContext(work_dir=tmp_path, artifact_dir=tmp_path, reference_model=path,
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


def max_identity_model(path, *, inf_in_conv: bool = False):
    """x[1,3,8,8] -> Conv -> Max(h, -inf scalar) -> Where(mask, h, -inf) -> ReduceMax over H,W -> Gemm ->
    logits[1,5]: the JAX pattern (a scalar -inf is the identity of Max; -inf masks before a max-pool).
    ``inf_in_conv`` puts one +inf into the Conv's weight instead (broken weights)."""
    import numpy as np
    from onnx import TensorProto as T
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(0)
    w = rng.normal(size=(4, 3, 3, 3)).astype(np.float32)
    if inf_in_conv:
        w[1, 0, 1, 1] = np.inf
    mask = np.ones((1, 1, 8, 8), bool)
    mask[..., 0, :] = False  # the first row is masked out
    inits = [nh.from_array(w, "conv_w"), nh.from_array(np.array(-np.inf, np.float32), "Const_26:0"),
             nh.from_array(mask, "mask"), nh.from_array(np.full((1, 4, 1, 1), -np.inf, np.float32), "neg_inf_map"),
             nh.from_array(rng.normal(size=(5, 4)).astype(np.float32), "fc_w"),
             nh.from_array(np.zeros(5, np.float32), "fc_b"), nh.from_array(np.array([1, 4], np.int64), "shape")]
    nodes = [h.make_node("Conv", ["x", "conv_w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             h.make_node("Max", ["c", "Const_26:0"], ["m"], name="max_identity"),
             h.make_node("Where", ["mask", "m", "neg_inf_map"], ["masked"], name="mask_where"),
             h.make_node("ReduceMax", ["masked"], ["pooled"], axes=[2, 3], keepdims=1, name="pool"),
             h.make_node("Reshape", ["pooled", "shape"], ["flat"], name="flat"),
             h.make_node("Gemm", ["flat", "fc_w", "fc_b"], ["logits"], transB=1, name="fc")]
    g = h.make_graph(nodes, "jax_like", [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 8, 8])],
                     [h.make_tensor_value_info("logits", T.FLOAT, [1, 5])], inits)
    model = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.save(model, str(path))
    return path


def test_inf_scalar_and_mask_constants_are_accepted_and_noted(tmp_path):
    src = max_identity_model(tmp_path / "jax.onnx")
    out, ctx = _run(src, tmp_path)
    assert ctx.record.report["infinite_constants"] == ["Const_26:0", "neg_inf_map"]
    assert ctx.record.checks["cosine_min"] >= 0.9999


def test_inf_inside_a_conv_weight_is_refused_naming_it(tmp_path):
    src = max_identity_model(tmp_path / "bad.onnx", inf_in_conv=True)
    with pytest.raises(BadModelError) as e:
        _run(src, tmp_path)
    assert e.value.exit_code == ExitCode.BAD_INPUT
    assert "'conv_w' of a Conv holds 1 infinite values" in e.value.message


@pytest.mark.slow
@pytest.mark.onnxruntime
def test_cli_int8_convert_of_a_minus_inf_constant_model(tmp_path, cli, test_profile):
    import numpy as np

    src = max_identity_model(tmp_path / "jax.onnx")
    np.savez(tmp_path / "calib.npz", x=np.random.default_rng(2).random((24, 3, 8, 8)).astype(np.float32))
    r = cli("convert", str(src), "--profile", str(test_profile), "-o", str(tmp_path / "art"),
            "--precision", "int8", "--calib", str(tmp_path / "calib.npz"), "--json")
    assert r.returncode == 0, r.stderr
    bad = max_identity_model(tmp_path / "bad.onnx", inf_in_conv=True)
    r = cli("convert", str(bad), "--profile", str(test_profile), "-o", str(tmp_path / "art2"),
            "--precision", "int8", "--calib", str(tmp_path / "calib.npz"))
    assert r.returncode == 3 and "conv_w" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "art2").exists()


def test_analyze_notes_inf_constants_and_flags_broken_weights(tmp_path):
    from edgeopt.analyze.preflight import weight_issues

    ok = weight_issues(onnx.load(str(max_identity_model(tmp_path / "jax.onnx"))))
    assert [(i.severity.value, i.kind.value) for i in ok] == [("info", "weights")]
    assert "'Const_26:0'" in ok[0].message and "convert accepts" in ok[0].message
    bad = weight_issues(onnx.load(str(max_identity_model(tmp_path / "bad.onnx", inf_in_conv=True))))
    assert bad[0].severity.value == "error" and "'conv_w' of a Conv" in bad[0].message
    assert weight_issues(onnx.load(str(conv_bn_model(tmp_path / "m.onnx", batch=1)))) == []
