"""Memory: the prediction against measurement on the bundled CNNs, the arena planner, the budget gate refusing
(exit 5 with the figures, nothing written) and adapting on a small-budget profile."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
import yaml

from edgeopt.memory.plan import Buffer, greedy_by_size, plan_arena
from edgeopt.memory.predict import predict_memory
from edgeopt.options import ConvertOptions, parse_bytes

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"
MNIST = REPO / "fixtures" / "models" / "mnist_cnn.onnx"
DATA = REPO / "fixtures" / "data"


def test_greedy_by_size_reuses_space_of_dead_tensors():
    bufs = [Buffer("a", 64, 0, 1), Buffer("b", 32, 1, 2), Buffer("c", 64, 2, 3)]
    offsets = greedy_by_size(bufs)
    assert offsets["a"] == 0 and offsets["c"] == 0  # a is dead when c is written: same space
    assert offsets["b"] == 64  # b lives beside both


def test_arena_is_at_least_the_largest_live_set_and_at_most_all_tensors():
    import onnx

    from edgeopt.analyze.shapes import resolve_shapes

    proto = onnx.load(str(MNIST))
    metas, _, _ = resolve_shapes(proto, "mnist")
    sizes = {n: m.nbytes for n, m in metas.items() if not m.is_param}
    plan = plan_arena(proto.graph, sizes)
    assert max(plan.live_bytes) <= plan.arena_bytes <= sum(sizes.values()) + 16 * len(sizes)


def test_int8_predicts_less_than_fp32():
    fp32 = predict_memory(DIGITS, "onnxruntime", "fp32")
    int8 = predict_memory(DIGITS, "onnxruntime", "int8")
    assert int8.weights_bytes < fp32.weights_bytes and int8.arena_bytes < fp32.arena_bytes
    assert fp32.total_bytes == fp32.weights_bytes + fp32.arena_bytes + fp32.runtime_bytes
    micro = predict_memory(DIGITS, "tflite", "int8", microcontroller=True)
    assert micro.weights_in_flash and micro.total_bytes == micro.arena_bytes + micro.runtime_bytes


def test_memory_budget_parses_sizes():
    assert parse_bytes("300MB") == 300_000_000 and parse_bytes("512KiB") == 512 * 1024
    assert ConvertOptions(memory_budget="1.5GB").memory_budget == 1_500_000_000
    with pytest.raises(ValueError):
        ConvertOptions(memory_budget="lots")


@pytest.mark.slow
@pytest.mark.onnxruntime
@pytest.mark.parametrize("model", [DIGITS, MNIST], ids=["digits", "mnist"])
def test_prediction_within_a_factor_of_measured_peak(model, tmp_path, cli):
    out = tmp_path / "a"
    r = cli("convert", model, "--profile", "host", "--backend", "onnxruntime", "--precision", "fp32",
            "-o", out, "--json")
    assert r.returncode == 0, r.stderr
    from edgeopt.memory.measure import measure_peak

    measured = measure_peak(out, runs=3)
    predicted = json.loads((out / "manifest.json").read_text())["memory"]["predicted"]["total_bytes"]
    assert "error" not in measured
    assert predicted / 3 < measured["peak_bytes"] < predicted * 3  # generous: RSS counts pages, not tensors


def _small_profile(tmp_path: Path, budget_mb: float | None = None) -> Path:
    data = yaml.safe_load((REPO / "device_profiles" / "pi5.yaml").read_text())
    data.update(name="tiny-board", aliases=[])
    data.pop("family"), data.pop("family_default")
    if budget_mb is not None:
        data["memory"]["budget_mb"] = budget_mb
        data["sources"]["memory.budget_mb"] = {"kind": "estimate", "ref": "a test", "note": "a small budget"}
    p = tmp_path / "tiny.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def _budget_between(low: int, high: int) -> str:
    return f"{(low + high) // 2}B"


@pytest.mark.onnxruntime
def test_gate_refuses_with_the_figures_and_writes_nothing(tmp_path, cli):
    fp32 = predict_memory(DIGITS, "onnxruntime", "fp32")
    int8 = predict_memory(DIGITS, "onnxruntime", "int8")
    out = tmp_path / "out"
    r = cli("convert", DIGITS, "--profile", _small_profile(tmp_path), "--backend", "onnxruntime", "--precision",
            "fp32", "--memory-budget", f"{int8.total_bytes - 1000}B", "--calib", DATA / "digits_calib.npz",
            "-o", out, "--json")
    assert r.returncode == 5, r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["kind"] == "gate_failed" and "weights" in err["message"] and "arena" in err["message"]
    assert "runtime" in err["message"] and "tiny-board has" in err["message"] and "int8 static" in err["message"]
    assert err["details"]["predicted"]["total_bytes"] == fp32.total_bytes
    assert not out.exists() and not list(tmp_path.glob("out.tmp-*"))


@pytest.mark.slow
@pytest.mark.onnxruntime
def test_gate_adapts_to_int8_when_fp32_does_not_fit(tmp_path, cli):
    fp32 = predict_memory(DIGITS, "onnxruntime", "fp32")
    int8 = predict_memory(DIGITS, "onnxruntime", "int8")
    budget_mb = (fp32.total_bytes + int8.total_bytes) / 2 / 1e6
    out = tmp_path / "out"
    r = cli("convert", DIGITS, "--profile", _small_profile(tmp_path, budget_mb), "--backend", "onnxruntime",
            "--precision", "fp32", "--calib", DATA / "digits_calib.npz", "--eval", DATA / "digits_test.npz",
            "-o", out, "--json")
    assert r.returncode == 0, r.stderr
    assert "int8 static fits" in r.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["precision"] == "int8"
    assert manifest["memory"]["adapted"] == {"requested": "fp32", "requested_bytes": fp32.total_bytes,
                                             "chosen": "int8 static"}
    assert manifest["memory"]["fits"] and manifest["memory"]["budget_source"] == "tiny-board's memory.budget_mb"


def test_analyze_shows_memory_against_the_budget_and_plots_it(tmp_path, cli):
    pytest.importorskip("matplotlib")
    plot = tmp_path / "roof.png"
    r = cli("analyze", DIGITS, "--profile", "stm32h7", "--no-preflight", "--plot", plot, "--json")
    assert r.returncode == 0, r.stderr
    mem = json.loads(r.stdout)["memory"]
    assert mem["fits"] and mem["budget_source"] == "stm32h7's memory.budget_mb"
    assert mem["predicted"]["weights_in_flash"] and mem["predicted"]["estimate"]
    assert (tmp_path / "roof-memory.png").stat().st_size > 0
    r = cli("analyze", DIGITS, "--profile", "stm32h7", "--no-preflight")
    assert "memory (estimate, tflite int8)" in r.stdout and "fits" in r.stdout


def test_a_refusal_on_every_backend_names_the_least_need_and_tries_no_float(tmp_path, cli):
    """pi5 tries LiteRT, ONNX Runtime, OpenVINO: none fits 10 MB, so the error gives the smallest need (LiteRT's,
    the profile's first) and no float precision is tried (it never needs less than INT8)."""
    tflite = predict_memory(DIGITS, "tflite", "int8")
    r = cli("convert", DIGITS, "--profile", "pi5", "--memory-budget", "10MB", "-o", tmp_path / "out", "--json")
    assert r.returncode == 5, r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["message"].startswith("memory: tflite int8 needs") and "also tried: onnxruntime" in err["message"]
    assert err["details"]["predicted"]["total_bytes"] == tflite.total_bytes
    assert "FP16" not in r.stderr and "FP32" not in r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.onnxruntime
def test_a_refusal_at_a_batch_over_one_names_batch_one_when_it_fits(tmp_path, cli):
    m = onnx.load(str(DIGITS))
    for vi in (m.graph.input[0], m.graph.output[0]):
        vi.type.tensor_type.shape.dim[0].dim_param = "N"
    dynamic = tmp_path / "digits_n.onnx"
    onnx.save(m, str(dynamic))
    one = predict_memory(dynamic, "onnxruntime", "fp32", input_shapes={"input": (1, 1, 8, 8)})
    big = predict_memory(dynamic, "onnxruntime", "int8", input_shapes={"input": (4096, 1, 8, 8)})  # INT8 tried too
    r = cli("convert", dynamic, "--profile", _small_profile(tmp_path), "--backend", "onnxruntime", "--precision",
            "fp32", "--input-shape", "input=4096x1x8x8", "--memory-budget", _budget_between(one.total_bytes,
            big.total_bytes), "-o", tmp_path / "out", "--json")
    assert r.returncode == 5, r.stderr
    err = json.loads(r.stdout)["error"]
    assert "use batch 1 (--input-shape input=1x1x8x8:" in err["hint"] and "which fits" in err["hint"]


def test_weights_that_do_not_fit_the_microcontrollers_flash_are_refused_before_work(tmp_path, cli):
    data = yaml.safe_load((REPO / "device_profiles" / "stm32h7.yaml").read_text())
    data.update(name="tiny-flash", aliases=[])
    data["memory"]["flash_kb"] = 16  # the digits CNN's INT8 weights are 20 KB
    profile = tmp_path / "tiny-flash.yaml"
    profile.write_text(yaml.safe_dump(data))
    r = cli("convert", DIGITS, "--profile", profile, "-o", tmp_path / "out", "--json")
    assert r.returncode == 5, r.stderr
    message = json.loads(r.stdout)["error"]["message"]
    assert "weights need 20.08 KB of flash, tiny-flash has 16.38 KB" in message
    assert not (tmp_path / "out").exists()


def test_analyze_judges_the_prediction_against_memory_budget(cli):
    pred = predict_memory(DIGITS, "tflite", "int8", microcontroller=True)
    r = cli("analyze", DIGITS, "--profile", "stm32h7", "--no-preflight", "--memory-budget",
            f"{pred.total_bytes - 1}B", "--json")
    assert r.returncode == 0, r.stderr
    mem = json.loads(r.stdout)["memory"]
    assert not mem["fits"] and mem["budget_source"] == "--memory-budget"
    assert mem["budget_bytes"] == pred.total_bytes - 1
    r = cli("analyze", DIGITS, "--profile", "stm32h7", "--no-preflight", "--memory-budget", "12 parsecs")
    assert r.returncode == 2 and "--memory-budget" in r.stderr


@pytest.mark.onnxruntime
def test_a_recipes_memory_budget_is_held_like_the_flag(tmp_path, cli):
    int8 = predict_memory(DIGITS, "onnxruntime", "int8")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"memory_budget: {int8.total_bytes - 1000}B\n")
    r = cli("convert", DIGITS, "--profile", _small_profile(tmp_path), "--backend", "onnxruntime", "--precision",
            "fp32", "--recipe", recipe, "-o", tmp_path / "out", "--json")
    assert r.returncode == 5, r.stderr
    assert "the recipe's memory_budget" in json.loads(r.stdout)["error"]["message"]


def test_in_place_activations_share_their_inputs_buffer():
    """Conv -> BatchNormalization -> Relu plans one buffer, as TFLite fuses them: the digits CNN's INT8 arena is
    what TFLite Micro's own planner laid out for its .tflite (4608 bytes, the allocator's head)."""
    assert predict_memory(DIGITS, "tflite", "int8", microcontroller=True).arena_bytes == 4608


@pytest.mark.onnxruntime
def test_bench_memory_reports_measured_beside_predicted(tmp_path, cli):
    out = tmp_path / "a"
    assert cli("convert", DIGITS, "--profile", "host", "--backend", "onnxruntime", "--precision", "fp32",
               "-o", out, "--json").returncode == 0
    r = cli("bench", out, "--memory", "--runs", "3", "--min-seconds", "0", "--warmup", "1", "--no-store", "--json")
    assert r.returncode == 0, r.stderr
    mem = json.loads(r.stdout)["rows"][0]["memory"]
    assert mem["measured"]["peak_bytes"] >= mem["measured"]["load_bytes"] > 0 and "VmHWM" in mem["measured"]["method"]
    assert mem["predicted"]["total_bytes"] > 0 and isinstance(mem["error_pct"], float)


@pytest.mark.onnxruntime
def test_a_budget_the_user_sets_is_measured_on_the_written_artifact(tmp_path, cli):
    """Under --memory-budget the manifest holds the measured peak beside the prediction, with the error, and inspect
    shows both; with the profile's own budget only the prediction is recorded (no extra process per build)."""
    out = tmp_path / "out"
    r = cli("convert", DIGITS, "--profile", "host", "--backend", "onnxruntime", "--precision", "fp32",
            "--memory-budget", "300MB", "-o", out, "--json")
    assert r.returncode == 0, r.stderr
    mem = json.loads((out / "manifest.json").read_text())["memory"]
    m = mem["measured"]
    assert 0 < m["load_bytes"] <= m["first_inference_bytes"] <= m["peak_bytes"], m
    assert m["error_pct"] == round(100 * (mem["predicted"]["total_bytes"] - m["peak_bytes"]) / m["peak_bytes"], 1)
    assert "this host" in m["where"] and "VmHWM" in m["method"]
    shown = cli("inspect", out).stdout
    assert "memory measured: peak" in shown and "budget 300 MB (--memory-budget)" in shown
    plain = tmp_path / "plain"
    r = cli("convert", DIGITS, "--profile", "host", "--backend", "onnxruntime", "--precision", "fp32", "-o", plain,
            "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads((plain / "manifest.json").read_text())["memory"]["measured"] is None
