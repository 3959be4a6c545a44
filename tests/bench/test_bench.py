"""``edgeopt bench``: side-by-side measurement, energy labels, per-layer join, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fixtures_convert import make_openvino_artifact, make_ort_artifact

from edgeopt.bench.energy import energy_figures
from edgeopt.bench.per_layer import join_with_predictions
from edgeopt.converters.backends.onnxruntime.per_layer import parse_ort_trace

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"
DIGITS_NPZ = REPO / "fixtures" / "data" / "digits_test.npz"
QUICK = ("--runs", "10", "--min-seconds", "0.05", "--warmup", "2", "--threads", "1")


def test_bench_missing_artifact_exits_3(cli, tmp_path):
    p = cli("bench", str(tmp_path / "missing"), "--no-store", "--json")
    assert p.returncode == 3
    assert json.loads(p.stdout)["error"]["exit_code"] == 3
    assert "Traceback" not in p.stderr


def test_bench_directory_without_manifest_exits_3(cli, tmp_path):
    (tmp_path / "empty").mkdir()
    p = cli("bench", str(tmp_path / "empty"), "--no-store")
    assert p.returncode == 3 and "manifest.json" in p.stderr


def test_bench_model_needs_a_profile(cli):
    p = cli("bench", str(DIGITS), "--no-store")
    assert p.returncode == 2 and "--profile" in p.stderr


@pytest.mark.onnxruntime
def test_bench_two_artifacts_side_by_side_and_stored(cli, tmp_path):
    a = make_ort_artifact(tmp_path / "fp32")
    b = make_ort_artifact(tmp_path / "other", accuracy=98.0)
    db = tmp_path / "r.db"
    p = cli("bench", str(a), str(b), *QUICK, "--inputs", str(DIGITS_NPZ), "--db", str(db),
            "--label", "stage=fp32", "--price-per-kwh", "0.5", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    table = out["table"]
    assert [r["name"] for r in table] == ["fp32", "other"]
    assert sum(r["best"] for r in table) == 1
    assert [r["accuracy"] for r in table] == [99.44, 98.0]
    for r in table:
        assert r["runs"] >= 10 and r["p50_ms"] > 0 and r["ci95_ms"][0] <= r["p50_ms"] <= r["ci95_ms"][1]
        assert r["energy_source"] == "estimated" and r["synthetic_inputs"] is False
    row = out["rows"][0]
    assert row["energy_figures"]["price_per_kwh"] == 0.5 and row["interleaved_with"] == 2
    assert row["labels"] == {"stage": "fp32"}
    from edgeopt.results import list_runs

    stored = list_runs(db)
    assert [r["id"] for r in stored] == [t["run_id"] for t in table]
    assert {r["stage"] for r in stored} == {"fp32"}


@pytest.mark.onnxruntime
def test_bench_per_layer_on_onnxruntime_joins_the_roofline(tmp_path):
    from edgeopt.bench.api import BenchOptions, bench_artifacts

    art = make_ort_artifact(tmp_path / "art")
    res = bench_artifacts([art], BenchOptions(min_runs=5, min_seconds=0, warmup=1, per_layer=True, store=False))
    pl = res["rows"][0]["per_layer"]
    assert pl["available"] and pl["backend"] == "onnxruntime"
    kinds = {op["op_type"] for op in pl["ops"]}
    assert any("Conv" in k for k in kinds)  # Conv, or FusedConv after ONNX Runtime's ALL-level fusions
    assert all(op["measured_us"] >= 0 for op in pl["ops"])


def test_bench_per_layer_not_available_for_other_backends(tmp_path):
    # every BackendName has a per-layer path now (tflite says why it has no times); a backend without one says so
    from edgeopt.bench.per_layer import per_layer_for_artifact, profiler_for
    from edgeopt.converters.backends.tflite.per_layer import per_layer_tflite
    from edgeopt.enums import BackendName

    assert all(profiler_for(b.value) is not None for b in BackendName)  # each backend class names its profiler
    assert profiler_for("tflite") is per_layer_tflite
    out = per_layer_for_artifact(str(tmp_path), {"runtime": {"backend": "coreml", "model": "m.mlmodel"}}, {})
    assert out == {"available": False, "note": "per-layer times are not available for coreml"}


def test_join_puts_ops_furthest_from_the_roof_first_synthetic():
    measured = [
        {"name": "conv1", "op_type": "Conv", "measured_us": 100.0},
        {"name": "relu", "op_type": "Relu", "measured_us": 30.0},
        {"name": "fused_thing", "op_type": "FusedConv", "measured_us": 50.0},
        {"name": "gemm", "op_type": "Gemm", "measured_us": 10.0},
    ]
    predicted = [
        {"name": "conv1", "predicted_us": 50.0, "bound": "compute"},  # 2x
        {"name": "relu", "predicted_us": 3.0, "bound": "memory"},  # 10x
        {"name": "gemm", "predicted_us": 5.0, "bound": "memory"},  # 2x, smaller
        {"name": "unused", "predicted_us": 1.0},
    ]
    rows = join_with_predictions(measured, predicted)
    assert [r["name"] for r in rows] == ["relu", "conv1", "gemm", "fused_thing"]
    assert rows[0]["measured_over_predicted"] == pytest.approx(10.0)
    assert rows[-1]["predicted_us"] is None and rows[-1]["measured_over_predicted"] is None


def test_parse_ort_trace_means_kernel_times_per_node():
    events = [
        {"cat": "Session", "name": "model_run", "dur": 999},
        {"cat": "Node", "name": "conv_kernel_time", "dur": 10, "args": {"op_name": "Conv"}},
        {"cat": "Node", "name": "conv_fence_before", "dur": 1},
        {"cat": "Node", "name": "conv_kernel_time", "dur": 30, "args": {"op_name": "Conv"}},
        {"cat": "Node", "name": "relu_kernel_time", "dur": 4, "args": {"op_name": "Relu"}},
    ]
    rows = {r["name"]: r for r in parse_ort_trace(events, runs=2)}
    assert rows["conv"] == {"name": "conv", "op_type": "Conv", "measured_us": 20.0}
    assert rows["relu"]["measured_us"] == 2.0


def test_energy_measured_beats_estimated_and_cost_follows_the_price():
    base = {"latency_ms": {"p50": 10.0}, "cpu_utilisation": 0.5}
    est = energy_figures(base, tdp_w=20.0, price_per_kwh=0.36)
    assert est["source"] == "estimated" and "estimated" in est["note"]
    assert est["joules_per_inference"] == pytest.approx(20.0 * 0.5 * 0.010)
    assert est["cost_per_1k_queries"] == pytest.approx(0.1 * 1000 / 3.6e6 * 0.36)
    meas = energy_figures({**base, "energy": {"source": "measured", "meter": "rapl", "joules_per_inference": 0.02}},
                          tdp_w=20.0)
    assert meas["source"] == "measured" and meas["joules_per_inference"] == 0.02
    assert energy_figures(base, tdp_w=None)["source"] == "unavailable"


def test_label_option_parsing():
    from edgeopt.cli.bench_cmd import _labels
    from edgeopt.errors import UsageError

    assert _labels(["stage=int8", "nightly"]) == {"stage": "int8", "label": "nightly"}
    with pytest.raises(UsageError):
        _labels(["stage="])


@pytest.mark.onnxruntime
def test_bench_model_reports_every_backend_and_the_reference(tmp_path, monkeypatch):
    """bench_model: the FP32 reference row is always measured; each requested backend is a row,
    measured or failed with its error (a failing backend does not stop the others)."""
    from edgeopt.bench.api import BenchOptions
    from edgeopt.bench.model import bench_model

    monkeypatch.setenv("EDGEOPT_CACHE_DIR", str(tmp_path / "cache"))
    res = bench_model(DIGITS, "host", backends="onnxruntime",
                      options=BenchOptions(min_runs=5, min_seconds=0, warmup=1, store=False))
    names = [r["name"] for r in res["rows"]]
    assert "reference onnxruntime fp32" in names
    assert "onnxruntime" in names
    ref = next(r for r in res["rows"] if r["name"] == "reference onnxruntime fp32")
    assert ref["status"] == "ok" and ref["latency_ms"]["p50"] > 0
    again = bench_model(DIGITS, "host", backends="onnxruntime",
                        options=BenchOptions(min_runs=5, min_seconds=0, warmup=1, store=False))
    assert {r.get("artifact") for r in again["rows"]} == {r.get("artifact") for r in res["rows"]}  # cache reused
    assert np.isfinite([r["latency_ms"]["p50"] for r in again["rows"] if r["status"] == "ok"]).all()


@pytest.mark.openvino
def test_bench_per_layer_on_openvino_reads_performance_counters(tmp_path):
    from edgeopt.bench.api import BenchOptions, bench_artifacts

    art = make_openvino_artifact(tmp_path / "ov")
    res = bench_artifacts([art], BenchOptions(min_runs=5, min_seconds=0, warmup=1, per_layer=True, store=False,
                                              threads=1))
    row = res["rows"][0]
    assert row["backend"] == "openvino" and row["latency_ms"]["p50"] > 0
    pl = row["per_layer"]
    assert pl["available"] and pl["backend"] == "openvino" and pl["ops"]
    assert any("Convolution" in op["op_type"] for op in pl["ops"])


@pytest.mark.onnxruntime
def test_keep_going_reports_a_broken_artifact_as_a_row(tmp_path):
    from edgeopt.bench.api import BenchOptions, bench_artifacts
    from edgeopt.errors import BadInputError

    good = make_ort_artifact(tmp_path / "good")
    bad = make_ort_artifact(tmp_path / "bad")
    (bad / "model.onnx").write_bytes(b"not a model")
    opts = BenchOptions(min_runs=3, min_seconds=0, warmup=1, store=False)
    with pytest.raises(BadInputError):
        bench_artifacts([good, bad], opts)
    res = bench_artifacts([good, bad], opts, keep_going=True)
    assert [(r["name"], r["status"]) for r in res["rows"]] == [("good", "ok"), ("bad", "failed")]
    assert "failed to load" in res["rows"][1]["error"]


@pytest.fixture(scope="module")
def digits_tflite_artifact(tmp_path_factory):
    from edgeopt.convert import convert
    from edgeopt.profiles import load_profile

    out = tmp_path_factory.mktemp("tfl") / "digits-tflite"
    convert(DIGITS, load_profile("host"), out, backend="tflite", precision="fp32", threads=1, force=True)
    return out


@pytest.mark.tflite
@pytest.mark.slow
def test_bench_per_layer_on_tflite_says_why_and_lists_static_ops(digits_tflite_artifact):
    from edgeopt.bench.api import BenchOptions, bench_artifacts

    res = bench_artifacts([digits_tflite_artifact], BenchOptions(min_runs=5, min_seconds=0, warmup=1, per_layer=True,
                                                                 store=False, threads=1))
    row = res["rows"][0]
    assert row["backend"] == "tflite" and row["latency_ms"]["p50"] > 0
    pl = row["per_layer"]
    assert pl["available"] is False and pl["backend"] == "tflite"
    assert "no op profiler" in pl["note"] and "benchmark_model" in pl["note"]
    static = pl["static_ops"]
    types = {t["op_type"]: t["count"] for t in static["by_type"]}
    assert any("CONV_2D" in t for t in types)  # the digits CNN's convolutions survive conversion
    assert sum(types.values()) == static["count"] == len(static["ops"]) > 0
    assert [op["index"] for op in static["ops"]] == list(range(static["count"]))
    assert "DELEGATE" not in types and static["delegate_kernels"] >= 1  # XNNPACK's kernels are counted apart


@pytest.mark.tflite
def test_per_layer_tflite_without_a_model_still_says_why(tmp_path):
    from edgeopt.bench.per_layer import per_layer_for_artifact

    out = per_layer_for_artifact(str(tmp_path), {"runtime": {"backend": "tflite", "model": "missing.tflite"}}, {})
    assert out["available"] is False and out["note"].startswith("per-layer times are not available for tflite:")
    assert "static_ops" not in out and out["static_ops_error"]


def test_tvm_kernel_names_map_to_their_first_op_and_join_by_type_and_order():
    from edgeopt.bench.per_layer import join_with_predictions
    from edgeopt.converters.backends.tvm.per_layer import match_by_op_type, tvm_kernel_op

    assert tvm_kernel_op("fused_conv2d_add_relu") == "conv2d"
    assert tvm_kernel_op("conv2d3") == "conv2d"
    assert tvm_kernel_op("fused_max_pool2d1") == "max_pool2d"
    assert tvm_kernel_op("add4") == "add"
    assert tvm_kernel_op("vm.builtin.alloc_tensor") == "vm.builtin"
    measured = [{"name": n, "op_type": tvm_kernel_op(n), "measured_us": 2.0, "calls_per_run": 1.0}
                for n in ("fused_conv2d_add_relu", "conv2d1", "add", "matmul", "relu")]
    predicted = [{"name": "/0/Conv", "op_type": "Conv", "predicted_us": 1.0},
                 {"name": "/1/Conv", "op_type": "Conv", "predicted_us": 0.5},
                 {"name": "/2/Gemm", "op_type": "Gemm", "predicted_us": 4.0},
                 {"name": "/3/Relu", "op_type": "Relu", "predicted_us": 1.0},
                 {"name": "/4/Relu", "op_type": "Relu", "predicted_us": 1.0}]
    match_by_op_type(measured, predicted)
    nodes = {m["name"]: m.get("onnx_node") for m in measured}
    # Conv and Gemm pair in order; one relu kernel against two Relu nodes is ambiguous; Add has no node
    assert nodes == {"fused_conv2d_add_relu": "/0/Conv", "conv2d1": "/1/Conv", "matmul": "/2/Gemm", "add": None,
                     "relu": None}
    rows = join_with_predictions(measured, predicted)
    assert [r["name"] for r in rows[:3]] == ["conv2d1", "fused_conv2d_add_relu", "matmul"]
    assert rows[0]["measured_over_predicted"] == 4.0


@pytest.mark.tvm
def test_bench_per_layer_on_tvm_times_each_kernel(tmp_path):
    from edgeopt.bench.api import BenchOptions, bench_artifacts
    from edgeopt.convert import convert

    art = tmp_path / "tvm"
    convert(str(DIGITS), "host", str(art), backend="tvm", precision="fp32", threads=1)
    res = bench_artifacts([art], BenchOptions(min_runs=5, min_seconds=0, warmup=1, per_layer=True, store=False,
                                              threads=1))
    row = res["rows"][0]
    assert row["backend"] == "tvm" and row["latency_ms"]["p50"] > 0
    pl = row["per_layer"]
    assert pl["available"] and pl["backend"] == "tvm" and pl["library"] == "model.so"
    kernels = [op for op in pl["ops"] if op["op_type"] != "vm.builtin"]
    assert len(kernels) == pl["kernels"] and kernels
    assert all(op["measured_us"] > 0 for op in pl["ops"])
    convs = [op for op in kernels if op["op_type"] == "conv2d"]
    assert convs and all("conv2d" in op["name"] for op in convs)
    # the digits CNN has 4 Conv nodes: the conv kernels pair with them by order, and get a roofline prediction
    assert pl["matched"] >= 1 and all(op["onnx_node"].endswith("/Conv") and op["predicted_us"] for op in convs)
    assert pl["instrument_overhead_us"] is None or pl["instrument_overhead_us"] > 0
