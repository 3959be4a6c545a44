"""``edgeopt analyze``: FLOP/byte counts against hand-computed values, the roofline, recommendations,
pre-flight, and the real CLI (JSON, plot, bad inputs)."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from edgeopt.analyze import analyze_model
from edgeopt.analyze.result import Bound, PreflightKind, RecommendationKind, Severity
from edgeopt.enums import BackendName, Precision, UnitKind
from edgeopt.profiles import parse_profile

F = TensorProto.FLOAT


def _profile_dict(name="toydev", fp32=10.0, int8=40.0, bw=1.0, mem_gb=1.0, static=False,
                  backends=({"name": "onnxruntime"},)):
    return {
        "name": name, "description": "a toy device for tests", "arch": "aarch64",
        "compute_units": [{"kind": "cpu", "name": "toy", "cores": 1, "clock_ghz": 1.0,
                           "peak_gops": {"fp32": fp32, "int8": int8}}],
        "memory": {"size_gb": mem_gb, "bandwidth_gbps": bw}, "tdp_w": 1.0, "backends": list(backends),
        "requires_static_shapes": static,
        "sources": {"compute_units.cpu.peak_gops": {"kind": "estimate", "ref": "test", "note": "made up"}},
    }


def toy_profile(**kw):
    return parse_profile(_profile_dict(**kw), "test")


def _init(name, shape, seed=0):
    return numpy_helper.from_array(np.random.default_rng(seed).standard_normal(shape).astype(np.float32), name)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _vi(name, shape, t=F):
    return helper.make_tensor_value_info(name, t, shape)


def conv_model(cin=3, cout=4, hw=8, k=3, group=1):
    w = _init("w", (cout, cin // group, k, k))
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[k // 2] * 4, group=group)
    return _model([node], [_vi("x", [1, cin, hw, hw])], [_vi("y", [1, cout, hw, hw])], [w])


def gemm_model(m=2, k=16, n=10):
    b, c = _init("b", (n, k)), _init("c", (n,))
    node = helper.make_node("Gemm", ["a", "b", "c"], ["y"], name="fc", transB=1)
    return _model([node], [_vi("a", [m, k])], [_vi("y", [m, n])], [b, c])


def add_chain_model(n=64 * 1024, depth=4):
    nodes, prev = [], "x"
    for i in range(depth):
        nodes.append(helper.make_node("Add", [prev, prev], [f"t{i}"], name=f"add{i}"))
        prev = f"t{i}"
    return _model(nodes, [_vi("x", [1, n])], [_vi(prev, [1, n])])


def conv_bn_model(n_pairs=3):
    nodes, inits, prev = [], [], "x"
    for i in range(n_pairs):
        inits += [_init(f"w{i}", (4, 4, 3, 3), i)] + [_init(f"bn{i}_{p}", (4,), i) for p in ("s", "b", "m")]
        inits.append(numpy_helper.from_array(np.ones(4, np.float32), f"bn{i}_v"))
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], name=f"conv{i}", pads=[1] * 4))
        nodes.append(helper.make_node("BatchNormalization", [f"c{i}", f"bn{i}_s", f"bn{i}_b", f"bn{i}_m", f"bn{i}_v"],
                                      [f"n{i}"], name=f"bn{i}"))
        prev = f"n{i}"
    # a BatchNorm after an Add is not foldable into a conv
    nodes.append(helper.make_node("Add", [prev, prev], ["a"], name="add"))
    nodes.append(helper.make_node("BatchNormalization", ["a", "bn0_s", "bn0_b", "bn0_m", "bn0_v"], ["y"], name="bn_add"))
    return _model(nodes, [_vi("x", [1, 4, 8, 8])], [_vi("y", [1, 4, 8, 8])], inits)


def _op(result, name):
    return next(o for o in result.ops if o.name == name)


# --------------------------------------------------------------------------- costs


def test_conv_flops_and_bytes_match_hand_computed():
    r = analyze_model(conv_model(), toy_profile(), preflight=False)
    conv = _op(r, "conv")
    macs = (1 * 4 * 8 * 8) * (3 * 3 * 3)  # output elements x (Cin/group x kh x kw)
    assert conv.macs == macs and conv.flops == 2 * macs == 13824
    assert conv.param_bytes == 4 * 3 * 3 * 3 * 4
    assert conv.act_read_bytes == 3 * 64 * 4 and conv.act_write_bytes == 4 * 64 * 4
    assert conv.bytes_fp32 == 432 + 768 + 1024
    assert conv.bytes_int8 == conv.bytes_fp32 // 4
    assert conv.intensity == pytest.approx(13824 / 2224, rel=1e-3)
    assert not conv.depthwise


def test_depthwise_conv_flops():
    r = analyze_model(conv_model(cin=8, cout=8, hw=16, group=8), toy_profile(), preflight=False)
    conv = _op(r, "conv")
    assert conv.depthwise
    assert conv.flops == 2 * (8 * 16 * 16) * (1 * 3 * 3)


def test_gemm_and_batched_matmul_flops():
    r = analyze_model(gemm_model(m=2, k=16, n=10), toy_profile(), preflight=False)
    fc = _op(r, "fc")
    assert fc.flops == 2 * 2 * 10 * 16
    assert fc.param_bytes == (10 * 16 + 10) * 4
    mm = _model([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")],
                [_vi("a", [2, 3, 4, 5])], [_vi("y", [2, 3, 4, 6])], [_init("b", (5, 6))])
    assert _op(analyze_model(mm, toy_profile(), preflight=False), "mm").flops == 2 * (2 * 3 * 4 * 6) * 5


def test_lstm_flops_and_recurrent_recommendation():
    seq, batch, inp, hid = 5, 1, 8, 16
    node = helper.make_node("LSTM", ["x", "w", "r"], ["y"], name="lstm", hidden_size=hid)
    m = _model([node], [_vi("x", [seq, batch, inp])], [_vi("y", [seq, 1, batch, hid])],
               [_init("w", (1, 4 * hid, inp)), _init("r", (1, 4 * hid, hid))])
    r = analyze_model(m, toy_profile(), preflight=False)
    assert _op(r, "lstm").macs == seq * batch * 4 * hid * (inp + hid)
    assert RecommendationKind.RECURRENT in {x.kind for x in r.recommendations}


# --------------------------------------------------------------------------- roofline


def test_roofline_picks_memory_or_compute_bound_on_toy_profile():
    # ridge = 10 GOPS / 1 GB/s = 10 FLOP/byte
    big = gemm_model(m=256, k=256, n=256)  # 33.6 MFLOP over ~0.79 MB: intensity ~42
    r = analyze_model(big, toy_profile(), preflight=False)
    fc = _op(r, "fc")
    assert fc.intensity > 10 and fc.bound == Bound.COMPUTE
    assert fc.time_us == pytest.approx(fc.flops / 10e9 * 1e6, rel=1e-3)
    add = _op(analyze_model(add_chain_model(depth=1), toy_profile(), preflight=False), "add0")
    assert add.intensity < 10 and add.bound == Bound.MEMORY
    assert add.time_us == pytest.approx(add.bytes_fp32 / 1e9 * 1e6, rel=1e-3)


def test_int8_prediction_beats_fp32_on_memory_bound_model():
    r = analyze_model(add_chain_model(), toy_profile(), preflight=False)
    fp32, int8 = r.prediction(UnitKind.CPU, Precision.FP32), r.prediction(UnitKind.CPU, Precision.INT8)
    assert r.estimate is True and fp32.estimate is True
    assert fp32.memory_bound_share == 1.0
    assert int8.roofline_ms == pytest.approx(fp32.roofline_ms / 4, rel=1e-3)
    rec = next(x for x in r.recommendations if x.kind == RecommendationKind.QUANTIZE_INT8)
    assert rec.speedup == pytest.approx(4.0, rel=1e-2)


def test_efficiency_and_overhead_go_into_estimate_not_roofline():
    r = analyze_model(add_chain_model(), toy_profile(), preflight=False, efficiency=0.5, overhead_us_per_op=2.0)
    p = r.prediction(UnitKind.CPU, Precision.FP32)
    assert p.overhead_ms == pytest.approx(4 * 2.0 / 1000)
    assert p.estimate_ms == pytest.approx(p.roofline_ms / 0.5 + p.overhead_ms, rel=1e-6)


# --------------------------------------------------------------------------- recommendations


def test_batchnorm_after_conv_recommendation_counts_only_foldable_ones():
    r = analyze_model(conv_bn_model(3), toy_profile(), preflight=False)
    rec = next(x for x in r.recommendations if x.kind == RecommendationKind.FOLD_BATCHNORM)
    assert rec.ops_affected == 3 and sorted(rec.ops) == ["bn0", "bn1", "bn2"]
    assert rec.bytes_saved == sum(_op(r, f"bn{i}").bytes_fp32 for i in range(3))


def test_model_larger_than_memory_and_overhead_bound_tiny_model():
    big = analyze_model(gemm_model(m=1, k=1024, n=1024), toy_profile(mem_gb=0.001), preflight=False)
    kinds = {x.kind for x in big.recommendations}
    assert RecommendationKind.TOO_LARGE_FOR_MEMORY in kinds and RecommendationKind.LARGE_FC in kinds
    tiny = analyze_model(gemm_model(m=1, k=4, n=2), toy_profile(fp32=1000, int8=4000, bw=100), preflight=False)
    assert RecommendationKind.OVERHEAD_BOUND in {x.kind for x in tiny.recommendations}


def test_constant_subgraph_is_folded_not_costed():
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], name="wt", perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["y"], name="mm")]
    m = _model(nodes, [_vi("x", [1, 8])], [_vi("y", [1, 4])], [_init("w", (4, 8))])
    r = analyze_model(m, toy_profile(), preflight=False)
    assert _op(r, "wt").bytes_fp32 == 0 and _op(r, "mm").param_bytes == 4 * 8 * 4


# --------------------------------------------------------------------------- pre-flight


def test_preflight_onnxruntime_loads_and_static_shapes_flagged():
    x = _vi("x", ["batch", 4])
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [x], [_vi("y", ["batch", 4])])
    r = analyze_model(m, toy_profile(static=True), input_shapes={"x": (1, 4)})
    assert any(i.backend == BackendName.ONNXRUNTIME and i.kind == PreflightKind.OK for i in r.preflight)
    assert any(i.kind == PreflightKind.DYNAMIC_SHAPE and i.severity == Severity.WARNING for i in r.preflight)


@pytest.mark.tvm
def test_preflight_tvm_names_op_its_importer_lacks():
    m = _model([helper.make_node("Celu", ["x"], ["y"], name="celu")], [_vi("x", [1, 4])], [_vi("y", [1, 4])])
    r = analyze_model(m, toy_profile(backends=({"name": "tvm"},)))
    issue = next(i for i in r.preflight if i.backend == BackendName.TVM)
    assert issue.kind == PreflightKind.UNSUPPORTED_OP and issue.ops == ["Celu"]


@pytest.mark.openvino
def test_preflight_openvino_queries_cpu_and_says_npu_not_checkable_here():
    m = _model([helper.make_node("Relu", ["x"], ["y"], name="relu")], [_vi("x", [1, 4])], [_vi("y", [1, 4])])
    backends = ({"name": "openvino", "settings": {"device": "CPU"}},)
    r = analyze_model(m, toy_profile(backends=backends))
    assert [i.kind for i in r.preflight if i.backend == BackendName.OPENVINO] == [PreflightKind.OK]
    npu = _profile_dict(backends=({"name": "openvino", "unit": "npu", "settings": {"device": "NPU"}},))
    npu["compute_units"].append({"kind": "npu", "name": "toy npu", "cores": 1, "clock_ghz": 1.0,
                                 "peak_gops": {"int8": 100.0}})
    r = analyze_model(m, parse_profile(npu, "test"))
    issue = next(i for i in r.preflight if i.backend == BackendName.OPENVINO)
    assert issue.kind == PreflightKind.NOT_CHECKABLE and "not checkable here" in issue.message
    assert r.primary_unit == UnitKind.NPU and [p.precision for p in r.predictions if p.unit == UnitKind.NPU] == [
        Precision.INT8]


# --------------------------------------------------------------------------- the real CLI


@pytest.fixture
def profile_dir(tmp_path):
    import yaml

    d = tmp_path / "profiles"
    d.mkdir()
    (d / "toydev.yaml").write_text(yaml.safe_dump(_profile_dict()))
    return d


def _save(model, path):
    onnx.save(model, str(path))
    return path


def test_cli_json_is_one_object(cli, tmp_path, profile_dir):
    path = _save(conv_bn_model(2), tmp_path / "m.onnx")
    p = cli("analyze", str(path), "--profile", "toydev", "--profile-dir", str(profile_dir), "--json", "--top", "3")
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.strip().splitlines()) == 1
    out = json.loads(p.stdout)
    a = out["analysis"]
    assert out["ok"] is True and a["estimate"] is True and a["profile"] == "toydev"
    assert len(a["heaviest"]) == 3 and a["totals"]["flops"] == 2 * 2 * (4 * 64) * (4 * 9) + 2 * 2 * 256 + 2 * 256 + 256
    assert any(r["kind"] == "fold_batchnorm" for r in a["recommendations"])


def test_cli_plot_writes_png(cli, tmp_path, profile_dir):
    path = _save(conv_model(), tmp_path / "m.onnx")
    png = tmp_path / "roof.png"
    p = cli("analyze", str(path), "--profile", "toydev", "--profile-dir", str(profile_dir),
            "--plot", str(png), "--no-preflight")
    assert p.returncode == 0, p.stderr
    assert "estimate" in p.stdout
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [f.name for f in tmp_path.iterdir() if f.name.startswith(".roof")] == []  # no temp file left


def _bad_inputs(tmp_path, repo):
    real_file = repo / "fixtures" / "models" / "digits_cnn.onnx"  # a real trained model, when committed
    real = real_file.read_bytes() if real_file.is_file() else _save(conv_bn_model(3), tmp_path / "real.onnx").read_bytes()
    (tmp_path / "random.onnx").write_bytes(np.random.default_rng(1).bytes(4096))
    (tmp_path / "truncated.onnx").write_bytes(real[: len(real) // 2])
    foo = _model([helper.make_node("FooBar", ["x"], ["y"], name="foo")], [_vi("x", [1, 4])], [_vi("y", [1, 4])])
    _save(foo, tmp_path / "foobar.onnx")
    relu = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    new = _model(relu, [_vi("x", [1, 4])], [_vi("y", [1, 4])])
    new.opset_import[0].version = 99
    (tmp_path / "opset99.onnx").write_bytes(new.SerializeToString())
    _save(_model(relu, [_vi("x", [1, "n"])], [_vi("y", [1, "n"])]), tmp_path / "dynamic.onnx")  # a length: no default
    return {
        "missing": (tmp_path / "nope.onnx", "not found"),
        "random": (tmp_path / "random.onnx", "not a readable ONNX"),
        "truncated": (tmp_path / "truncated.onnx", "not a readable ONNX"),
        "unknown_op": (tmp_path / "foobar.onnx", "FooBar"),
        "opset99": (tmp_path / "opset99.onnx", "opset 99"),
        "dynamic": (tmp_path / "dynamic.onnx", "--input-shape x="),
    }


def test_cli_bad_inputs_exit_3_with_one_line(cli, tmp_path, profile_dir, repo):
    for case, (path, expect) in _bad_inputs(tmp_path, repo).items():
        p = cli("analyze", str(path), "--profile", "toydev", "--profile-dir", str(profile_dir), "--no-preflight")
        assert p.returncode == 3, (case, p.returncode, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in p.stderr, (case, p.stderr)
        assert expect in lines[0], (case, lines[0])


def test_a_dynamic_batch_is_analyzed_at_batch_1(cli, tmp_path, profile_dir):
    """A batch dim left dynamic ([n,4]) is analyzed at batch 1, as convert converts it."""
    relu = [helper.make_node("Relu", ["x"], ["y"], name="relu")]
    path = _save(_model(relu, [_vi("x", ["n", 4])], [_vi("y", ["n", 4])]), tmp_path / "batch.onnx")
    p = cli("analyze", str(path), "--profile", "toydev", "--profile-dir", str(profile_dir), "--no-preflight")
    assert p.returncode == 0, p.stderr
    assert "x[1, 4]" in p.stdout


def test_cli_unknown_profile_and_wrong_input_name(cli, tmp_path, profile_dir):
    path = _save(conv_model(), tmp_path / "m.onnx")
    p = cli("analyze", str(path), "--profile", "toydevv", "--profile-dir", str(profile_dir))
    assert p.returncode == 3 and "did you mean 'toydev'" in p.stderr
    p = cli("analyze", str(path), "--profile", "toydev", "--profile-dir", str(profile_dir), "--input-shape", "xx=1x3x8x8")
    assert p.returncode == 2 and "not an input" in p.stderr and "Traceback" not in p.stderr


def test_input_shapes_of_several_inputs_in_one_option():
    from edgeopt.errors import UsageError
    from edgeopt.model import parse_input_shapes

    # what a user types for a model with two inputs (silero VAD: audio and state), and the older forms
    assert parse_input_shapes(["input=1x576,state=2x1x128"]) == {"input": (1, 576), "state": (2, 1, 128)}
    assert parse_input_shapes(["y=1,10"]) == {"y": (1, 10)}
    assert parse_input_shapes(["a=1x2;b=3,4", "c=5"]) == {"a": (1, 2), "b": (3, 4), "c": (5,)}
    with pytest.raises(UsageError, match="is not NAME=DIMS"):
        parse_input_shapes(["input=1x576,oops"])
