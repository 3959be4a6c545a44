"""INT8 modes (static, dynamic, weight-only) per backend, ``--quant-mode``, the mode search under a bound, and
ONNX Runtime's per-channel crash retried per-tensor.

Models: a small LSTM + Linear built here with ``onnx.helper`` (random weights, so its metric is agreement with
FP32), the digits CNN and its human-labelled data, and magika's real byte classifier (the crash).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from edgeopt.converters.accuracy_bound import AccuracyBound
from edgeopt.converters.base import ChainContext, Intermediate, StageRecord
from edgeopt.converters.quantize.bound import TIE
from edgeopt.converters.quantize.modes import DynamicMode, Granularity, StaticMode, WeightsMode
from edgeopt.data import Dataset
from edgeopt.errors import UsageError

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"


def tiny_lstm(path: Path, steps: int = 20, feat: int = 16, hidden: int = 32, out: int = 8, seed: int = 0) -> Path:
    import onnx
    from onnx import TensorProto
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(seed)
    w = {"W": rng.normal(0, 0.3, (1, 4 * hidden, feat)), "R": rng.normal(0, 0.3, (1, 4 * hidden, hidden)),
         "B": rng.normal(0, 0.1, (1, 8 * hidden)), "L": rng.normal(0, 0.3, (hidden, out))}
    nodes = [h.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2], name="tr"),
             h.make_node("LSTM", ["xt", "W", "R", "B"], ["Y", "Yh"], hidden_size=hidden, name="lstm"),
             h.make_node("Squeeze", ["Yh", "ax"], ["hs"], name="sq"),
             h.make_node("MatMul", ["hs", "L"], ["y"], name="fc")]
    inits = [nh.from_array(v.astype(np.float32), k) for k, v in w.items()] + [nh.from_array(np.array([0]), "ax")]
    graph = h.make_graph(nodes, "tiny_lstm", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, steps, feat])],
                         [h.make_tensor_value_info("y", TensorProto.FLOAT, [1, out])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def bf16_here() -> bool:
    """This CPU runs bf16 natively (AMX/AVX512-BF16) and so does the host profile made from it: the host's
    OpenVINO INT8 mode search then tries each mode with bf16 activations too."""
    import openvino as ov

    from edgeopt.enums import Precision
    from edgeopt.float_precisions import native_float_precisions
    from edgeopt.profiles import load_profile

    return "BF16" in ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES") and \
        Precision.BF16 in native_float_precisions(load_profile("host"), "openvino")


def ov_mode_rows(*modes: str) -> set[str]:
    """The OpenVINO mode search's candidates on the host profile: ``modes``, and each with bf16 activations where
    this CPU runs bf16."""
    return set(modes) | ({f"{m}, bf16 activations" for m in modes} if bf16_here() else set())


def lstm_data(n: int, seed: int) -> Dataset:
    x = np.random.default_rng(seed).normal(size=(n, 1, 20, 16)).astype(np.float32)
    return Dataset({"x": x}, ranks={"x": 3})


def _ctx(tmp_path, calib, ev=None):
    (tmp_path / "art").mkdir(exist_ok=True)
    return ChainContext(work_dir=tmp_path, artifact_dir=tmp_path / "art", reference_model=tmp_path,
                        calib=calib, eval=ev, check_samples=calib.subset(np.arange(4)), threads=2,
                        record=StageRecord("qdq", {}))


# --------------------------------------------------------------------------- each mode, each backend
@pytest.mark.onnxruntime
def test_qdq_quantizer_static_and_dynamic_count_units_and_refuse_weights(tmp_path):
    from edgeopt.converters.quantize.qdq_quantizer import QdqQuantizer

    model, q = tiny_lstm(tmp_path / "lstm.onnx"), QdqQuantizer()
    calib = lstm_data(16, 1)
    static = q.quantize(model, StaticMode(), tmp_path / "s.onnx", calib=calib)
    assert (static.quantized_units, static.float_units) == (1, 1)  # QDQ quantizes the MatMul; the LSTM stays float
    for g in Granularity:
        dyn = q.quantize(model, DynamicMode(granularity=g), tmp_path / f"d-{g.value}.onnx")
        assert (dyn.quantized_units, dyn.float_units) == (2, 0)  # DynamicQuantizeLSTM and the MatMul
    kept = q.quantize(model, DynamicMode(), tmp_path / "k.onnx", keep_float=("fc",))
    assert (kept.quantized_units, kept.float_units) == (1, 1)
    with pytest.raises(UsageError, match="no weight-only INT8"):
        q.quantize(model, WeightsMode(), tmp_path / "w.onnx")


@pytest.mark.openvino
def test_openvino_quantizer_static_and_weights_count_units_and_refuse_dynamic(tmp_path):
    import openvino as ov

    from edgeopt.converters.backends.openvino.quantizer import OpenVINOQuantizer

    q, calib = OpenVINOQuantizer(), lstm_data(16, 1)
    model = tiny_lstm(tmp_path / "lstm.onnx")
    static = q.quantize(model, StaticMode(), tmp_path / "s.xml", calib=calib)
    assert (static.quantized_units, static.float_units) == (2, 0)
    weights = q.quantize(model, WeightsMode(), tmp_path / "w.xml")
    assert weights.quantized_units >= 1 and weights.quantized_units + weights.float_units == 2
    assert ov.Core().read_model(str(weights.path)).get_ordered_ops()  # written, readable
    cnn = q.quantize(DIGITS, WeightsMode(), tmp_path / "c.xml")
    assert cnn.quantized_units == 5 and cnn.float_units == 0
    with pytest.raises(UsageError, match="dynamic INT8 is not offered"):
        q.quantize(model, DynamicMode(), tmp_path / "d.xml")
    with pytest.raises(UsageError, match="per output channel only"):
        q.quantize(model, WeightsMode(granularity=Granularity.PER_TENSOR), tmp_path / "t.xml")



def test_openvino_searches_time_the_lstm_kernel_the_artifact_runs(tmp_path):
    """The searches compile a candidate as the artifact's runner will: from IR. ``ov.convert_model``'s in-memory
    model of a torch-exported LSTM compiles to TensorIterator loops (2x slower on resemblyzer's encoder), the same
    model read from IR to oneDNN's RNNSeq; timing the in-memory one judged OpenVINO by a kernel it never ships."""
    import openvino as ov
    from test_tflite_quantizer import _torch_lstm

    from edgeopt.converters.backends.openvino.runs import compiled_run

    def kernels(compiled) -> set[str]:
        return {op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ordered_ops()}

    path = _torch_lstm(tmp_path / "enc.onnx")
    in_memory = ov.convert_model(str(path))
    core = ov.Core()
    assert "TensorIterator" in kernels(core.compile_model(in_memory, "CPU"))  # the trap, still there
    run = compiled_run(core, in_memory, ["mels"], ["embed"], 1)
    assert "RNNSeq" in kernels(run.compiled) and "TensorIterator" not in kernels(run.compiled)
    assert run({"mels": np.ones((1, 20, 8), np.float32)})["embed"].shape == (1, 12)

# --------------------------------------------------------------------------- the mode search
def test_choose_mode_keeps_the_fastest_within_the_bound_and_says_why_others_were_dropped(tmp_path):
    """Three candidates on a 4-class agreement metric: one over the bound, one within it but slow (it sleeps
    5 ms a call), one within it and fast. The fast one is kept; the others are dropped with their reasons."""
    from edgeopt.converters.quantize.bound import Bounded, ModeCandidate, choose_mode
    from edgeopt.converters.quantize.modes import QuantizedModel

    rng = np.random.default_rng(0)
    w = rng.normal(size=(8, 4))
    data = Dataset({"x": rng.normal(size=(480, 8)).astype(np.float32)}, ranks={"x": 1})  # 240 confirm 1 point
    search, confirm = data.split(0.5, seed=0)

    def fp32(feed):
        return {"y": feed["x"] @ w}

    def noisy(scale, delay=0.0):
        def run(feed):
            if delay:
                time.sleep(delay)
            return {"y": feed["x"] @ w + scale * rng.normal(size=(1, 4))}
        return run

    def cand(label, run, mode):
        return ModeCandidate(label, lambda: (label, run, QuantizedModel(None, mode, 2, 0)))

    choice = choose_mode([cand("dynamic per-tensor", noisy(50.0), DynamicMode(granularity=Granularity.PER_TENSOR)),
                          cand("static per-channel", noisy(0.0, 0.005), StaticMode()),
                          cand("dynamic per-channel", noisy(0.0), DynamicMode())],
                         b=Bounded(search, confirm, fp32, 2), bound=1.0, budget_s=3600, fp32_timed=fp32,
                         backend="onnxruntime")
    rows = {r["mode"]: r for r in choice.report["candidates"]}
    assert choice.label == "dynamic per-channel" and rows["dynamic per-channel"]["verdict"] == "chosen"
    assert rows["dynamic per-tensor"]["verdict"] == "dropped"
    assert rows["dynamic per-tensor"]["why"].startswith("over the bound: drop")
    assert rows["dynamic per-tensor"]["search_drop_points"] > 1.0 and "latency_ms" not in rows["dynamic per-tensor"]
    assert rows["static per-channel"]["why"].startswith("slower:")
    assert rows["static per-channel"]["latency_ms"] > rows["dynamic per-channel"]["latency_ms"]
    json.dumps(choice.report)


def test_the_users_metric_drives_the_mode_choice(tmp_path):
    """Two candidates: a fast one whose outputs are FP32's times 10 (the same argmax: the default agreement metric
    sees no difference) and a slow exact one. With the default metric the fast one is kept; with the user's metric
    (``--metric my_metric:closeness``, the bound's metric, which ``prepare`` puts in ``Bounded``), which scores how close the
    outputs are to FP32's, the fast one is over the bound and the slow one is kept."""
    from edgeopt.converters.quantize.bound import Bounded, ModeCandidate, choose_mode
    from edgeopt.converters.quantize.modes import QuantizedModel
    from edgeopt.metrics import as_metric_spec

    (tmp_path / "my_metric.py").write_text(
        "import numpy as np\n"
        "def closeness(outputs, labels, reference):\n"
        "    err = [np.abs(o['y'] - r['y']).max() / np.abs(r['y']).max() for o, r in zip(outputs, reference)]\n"
        "    return 100.0 * float(np.mean(np.asarray(err) < 0.01))\n")
    rng = np.random.default_rng(0)
    w = rng.normal(size=(8, 4))
    search, confirm = Dataset({"x": rng.normal(size=(480, 8)).astype(np.float32)}, ranks={"x": 1}).split(0.5, seed=0)

    def fp32(feed):
        return {"y": feed["x"] @ w}

    def slow(feed):
        time.sleep(0.005)
        return fp32(feed)

    def choose(metric=None):
        cands = [ModeCandidate(label, lambda lb=label, run=run: (lb, run, QuantizedModel(None, DynamicMode(), 1, 0)))
                 for label, run in (("scaled", lambda f: {"y": 10 * fp32(f)["y"]}), ("exact", slow))]
        return choose_mode(cands, b=Bounded(search, confirm, fp32, 2, metric, (str(tmp_path),)), bound=1.0, budget_s=3600, fp32_timed=fp32,
                           backend="onnxruntime")

    assert choose().label == "scaled"
    mine = choose(as_metric_spec("my_metric:closeness"))
    assert mine.label == "exact" and mine.report["metric"].endswith("my_metric:closeness")
    assert mine.report["candidates"][0]["why"].startswith("over the bound: drop 100.00")


def _quantize_report(art: Path, stage: str) -> dict:
    manifest = json.loads((art / "manifest.json").read_text())
    return next(s["report"] for s in manifest["stages"] if s["name"] == stage)


@pytest.mark.openvino
def test_auto_with_a_bound_tries_weight_only_and_static_on_a_recurrent_model(tmp_path, cli):
    """OpenVINO: on the LSTM, weight-only and static are both built; static INT8 of this LSTM's activations is
    far over the bound (dropped, with its figures) and weight-only is kept. The manifest names the mode, the
    backend and the quantized/float op counts."""
    model = tiny_lstm(tmp_path / "lstm.onnx")
    np.savez(tmp_path / "cal.npz", x=lstm_data(64, 1).arrays["x"][:, 0])
    np.savez(tmp_path / "ev.npz", x=lstm_data(128, 2).arrays["x"][:, 0])  # 64 held back confirm a 5-point bound
    r = cli("convert", str(model), "--profile", "host", "--backend", "openvino", "--precision", "int8",
            "--calib", str(tmp_path / "cal.npz"), "--eval", str(tmp_path / "ev.npz"), "--max-accuracy-drop", "5",
            "-o", str(tmp_path / "ov"))
    assert r.returncode == 0, r.stderr
    rep = _quantize_report(tmp_path / "ov", "openvino")
    rows = {row["mode"]: row for row in rep["mode_search"]["candidates"]}
    assert set(rows) == ov_mode_rows("weights per-channel", "static per-channel")
    assert rows["static per-channel"]["verdict"] == "dropped" and "over the bound" in rows["static per-channel"]["why"]
    [chosen] = [m for m, row in rows.items() if row["verdict"] == "chosen"]
    assert rep["mode"] == "weights" and chosen.startswith("weights per-channel")
    assert rep["quantized"]["backend"] == "openvino" and rep["quantized"]["quantized_units"] >= 1
    # the report says it once, from mode_search (at f32 or, where this CPU runs bf16, with bf16 activations)
    assert "openvino modes: weights per-channel" in r.stdout and f"{chosen}: chosen" in r.stdout
    assert "static per-channel: dropped (over the bound" in r.stdout and "dropped" not in rep["mode_reason"]


@pytest.mark.openvino
def test_auto_with_a_bound_on_a_cnn_tries_weight_only_and_static_on_openvino(tmp_path, cli):
    """A convolutional graph gets both candidates too (weight-only beat static on rapidocr's PP-LCNet): each is
    judged on the bound, those within it timed on OpenVINO, the fastest kept; the report says why the other went."""
    data = REPO / "fixtures" / "data"
    r = cli("convert", str(DIGITS), "--profile", "host", "--backend", "openvino", "--precision", "int8",
            "--calib", str(data / "digits_calib.npz"), "--eval", str(data / "digits_test.npz"),
            "--max-accuracy-drop", "2", "-o", str(tmp_path / "cnn"), "--json")  # 1 lost of 270 held back: up to 1.5
    assert r.returncode == 0, r.stderr
    rep = _quantize_report(tmp_path / "cnn", "openvino")
    rows = {row["mode"]: row for row in rep["mode_search"]["candidates"]}
    assert set(rows) == ov_mode_rows("weights per-channel", "static per-channel")
    assert "weight-only and static INT8 are both built" in rep["mode_reason"] and "not tried" not in rep["mode_reason"]
    chosen = [m for m, row in rows.items() if row["verdict"] == "chosen"]
    if chosen:  # the fastest of those within the bound, the other dropped with its reason
        assert len(chosen) == 1 and rep["mode"] == chosen[0].split()[0] and rep["mode_search"]["chosen"] == chosen[0]
        from edgeopt.converters.quantize.bound import TIE

        timed = [row for row in rows.values() if "latency_ms" in row]  # the fastest, or tied with it and more accurate
        assert rows[chosen[0]]["latency_ms"] <= (1 + TIE) * min(row["latency_ms"] for row in timed)
    else:  # none held as built: static with its fallback search
        assert rep["mode"] == "static" and "accuracy_aware" in rep
    assert all(row["verdict"] == "dropped" and row["why"] for m, row in rows.items() if m not in chosen)
    assert rep["quantized"]["backend"] == "openvino" and rep["quantized"]["quantized_units"] >= 1


@pytest.mark.openvino
def test_an_npu_profile_judges_the_candidates_at_the_precision_the_artifact_runs_at(tmp_path, cli):
    """intel-npu's artifact runs with OpenVINO's f16 hint (checked on the CPU here): its mode search judges each
    candidate at f16 too, so the search and the final gate measure the same model (the PP-OCRv4 recogniser passed a
    search judged at f32 and then failed the gate at f16, 2.00 points over)."""
    data = REPO / "fixtures" / "data"
    r = cli("convert", str(DIGITS), "--profile", "intel-npu", "--precision", "int8", "--calib",
            str(data / "digits_calib.npz"), "--eval", str(data / "digits_test.npz"), "--max-accuracy-drop", "2",
            "-o", str(tmp_path / "npu"), "--json")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "npu" / "manifest.json").read_text())
    rep = _quantize_report(tmp_path / "npu", "openvino")
    assert manifest["runtime"]["settings"]["inference_precision"] == "f16"
    assert rep["mode_search"]["judged_at_hint"] == "f16"
    assert rep.get("accuracy_aware", {}).get("judged_at_hint", "f16") == "f16"
    # what this CPU really ran the f16 hint as (bf16 on an AVX512-BF16 CPU, f32 without) is said, not hidden
    from edgeopt.converters.backends.openvino.runs import cpu_runs_hint_as

    ran = cpu_runs_hint_as("f16")
    assert rep["mode_search"].get("cpu_ran_it_as", "f16") == ran
    on = manifest["validation"]["checked_on"]
    assert on["target"] == "openvino NPU (f16)" and on["provider"] == f"openvino CPU ({ran})"
    assert on["why"].startswith("NPU is not on this machine")
    assert ("the artifact is checked on CPU" + (f", which runs its f16 precision hint as {ran}" if ran != "f16" else "")
            in r.stderr)


@pytest.mark.openvino
def test_int8_weights_with_bf16_activations_are_candidates_where_the_cpu_runs_bf16(tmp_path, cli):
    """On a CPU with AMX/AVX512-BF16 (the host profile made from it), OpenVINO's own recipe there, INT8 weights
    with float ops and activations in bf16, is a candidate of each mode, judged and timed like the others; when
    chosen the artifact runs at the bf16 hint and says so (g2p-en's GRU on an AMX Xeon: weight-only INT8 with bf16
    activations x1.89 over OpenVINO FP32, weight-only at f32 x0.97). Without bf16 here only the f32 candidates."""
    model = tiny_lstm(tmp_path / "lstm.onnx")
    np.savez(tmp_path / "cal.npz", x=lstm_data(64, 1).arrays["x"][:, 0])
    np.savez(tmp_path / "ev.npz", x=lstm_data(128, 2).arrays["x"][:, 0])  # 64 held back confirm a 5-point bound
    r = cli("convert", str(model), "--profile", "host", "--backend", "openvino", "--precision", "int8",
            "--quant-mode", "weights", "--calib", str(tmp_path / "cal.npz"), "--eval", str(tmp_path / "ev.npz"),
            "--max-accuracy-drop", "5", "-o", str(tmp_path / "ov"), "--json")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "ov" / "manifest.json").read_text())
    rep = _quantize_report(tmp_path / "ov", "openvino")
    rows = {row["mode"]: row for row in rep["mode_search"]["candidates"]}
    assert set(rows) == ov_mode_rows("weights per-channel")
    [chosen] = [m for m, row in rows.items() if row["verdict"] == "chosen"]
    hint = "bf16" if chosen.endswith("bf16 activations") else "f32"
    assert manifest["precision"] == "int8" and rep["mode"] == "weights" and rep["quantized"]["quantized_units"] >= 1
    assert manifest["runtime"]["settings"]["inference_precision"] == hint
    assert rep.get("int8_activations", "f32") == hint
    from edgeopt.runtime.runners import open_runner

    with open_runner(str(tmp_path / "ov"), threads=1) as runner:
        assert runner.properties["INFERENCE_PRECISION_HINT"] == hint  # what the CPU plugin compiled it with


def test_bf16_activations_are_planned_only_for_a_cpu_with_native_bf16_and_tried_only_where_it_can_be_checked():
    from edgeopt.converters.backends.openvino.modes import activation_hints
    from edgeopt.plan import make_plan
    from edgeopt.profiles import load_profile

    def ov_config(profile):
        plan = make_plan(load_profile(profile), backend="openvino", precision="int8")
        return next(s for s in plan.stages if s.name == "openvino").config

    avx512 = ov_config("x86-avx512")
    assert [h.value for h in avx512.int8_activation_hints] == ["bf16"]
    assert ov_config("intel-npu").int8_activation_hints == ()  # an NPU runs its own f16 hint
    report: dict = {}
    assert activation_hints(avx512, False, report) == []  # a CPU here without bf16 can't check them: said
    assert "can't be checked here" in report["int8_activation_hints_skipped"]
    assert activation_hints(avx512, True, {}) == ["bf16"]


def test_an_npu_int8_miss_names_the_precision_it_was_judged_at_and_the_cpu_build():
    """No INT8 within the bound on an NPU profile: the message says the CPU here ran the NPU's f16 hint as another
    precision, and the hint names the build for the laptop's CPU (the NPU has no fp32 to keep)."""
    from edgeopt.converters.backends.openvino.search import no_int8_holds
    from edgeopt.converters.quantize.candidate import Candidate, SearchResult

    report = {"metric": "top1_agreement_with_fp32", "metric_unit": "%", "budget_s": 60, "candidates": 6,
              "fp32": {"search": 100.0, "confirm": 100.0}, "tried": [], "judged_at_hint": "f16",
              "cpu_ran_it_as": "bf16"}
    result = SearchResult(None, Candidate("static", search_value=90.48), report=report)
    err = no_int8_holds(result, 2.0, None, "NPU")
    assert err.exit_code == 5
    assert "judged at the NPU's f16 precision hint, which this CPU runs as bf16" in err.message
    assert "--set openvino.device=CPU --set openvino.inference_precision=f32" in err.hint
    on_cpu = no_int8_holds(result, 2.0, 13.3)
    assert "--precision bf16 (native here: drop 13.30" in on_cpu.hint and "openvino.device" not in on_cpu.hint


@pytest.mark.onnxruntime
def test_pinned_quant_mode_on_the_cli_and_a_mode_the_backend_lacks(tmp_path, cli):
    model = tiny_lstm(tmp_path / "lstm.onnx")
    np.savez(tmp_path / "cal.npz", x=lstm_data(32, 1).arrays["x"][:, 0])
    r = cli("convert", str(model), "--profile", "host", "--backend", "onnxruntime", "--precision", "int8",
            "--quant-mode", "dynamic", "--calib", str(tmp_path / "cal.npz"), "-o", str(tmp_path / "d"), "--json")
    assert r.returncode == 0, r.stderr
    rep = _quantize_report(tmp_path / "d", "qdq")
    assert rep["mode"] == "dynamic" and rep["quantized"] == {**rep["quantized"], "quantized_units": 2, "float_units": 0}
    r = cli("convert", str(model), "--profile", "host", "--backend", "onnxruntime", "--precision", "int8",
            "--quant-mode", "static", "--calib", str(tmp_path / "cal.npz"), "-o", str(tmp_path / "s"), "--json")
    assert r.returncode == 0, r.stderr
    assert _quantize_report(tmp_path / "s", "qdq")["quantized"]["float_units"] == 1  # its LSTM stays float
    r = cli("convert", str(model), "--profile", "host", "--backend", "onnxruntime", "--precision", "int8",
            "--quant-mode", "weights", "--calib", str(tmp_path / "cal.npz"), "-o", str(tmp_path / "w"))
    assert r.returncode == 2 and "does not offer weights INT8" in r.stderr and "--quant-mode static" in r.stderr
    r = cli("convert", str(model), "--profile", "host", "--quant-mode", "dynamc", "--dry-run")
    assert r.returncode == 2 and "--quant-mode 'dynamc'" in r.stderr


@pytest.mark.onnxruntime
def test_a_jetson_profile_gets_static_int8_only_because_tensorrt_reads_qdq(tmp_path, cli):
    """TensorRT builds INT8 from explicit Q/DQ only: on a Jetson profile the recurrent model that gets dynamic INT8 on
    the host gets static (its LSTM in float, the MatMul in Q/DQ), and a pinned dynamic is refused with the reason."""
    model = tiny_lstm(tmp_path / "lstm.onnx")
    np.savez(tmp_path / "cal.npz", x=lstm_data(32, 1).arrays["x"][:, 0])
    r = cli("convert", str(model), "--profile", "jetson-orin-nano", "--backend", "onnxruntime", "--precision", "int8",
            "--calib", str(tmp_path / "cal.npz"), "-o", str(tmp_path / "j"), "--json")
    assert r.returncode == 0, r.stderr
    rep = _quantize_report(tmp_path / "j", "qdq")
    assert rep["mode"] == "static" and "TensorRT builds its INT8 engine from explicit Q/DQ" in rep["mode_reason"]
    assert rep["preset"] == "tensorrt" and rep["quantized"]["quantized_units"] == 1
    r = cli("convert", str(model), "--profile", "jetson-orin-nano", "--backend", "onnxruntime", "--precision", "int8",
            "--quant-mode", "dynamic", "--calib", str(tmp_path / "cal.npz"), "-o", str(tmp_path / "jd"))
    assert r.returncode == 2 and "dynamic INT8 refused: TensorRT" in r.stderr and "--quant-mode static" in r.stderr
    assert not (tmp_path / "jd").exists()


@pytest.mark.onnxruntime
def test_auto_with_a_bound_on_a_recurrent_model_tries_dynamic_and_static_on_onnxruntime(tmp_path):
    from edgeopt.converters.quantize import QdqConfig, QdqStage

    model = tiny_lstm(tmp_path / "lstm.onnx")
    ctx = _ctx(tmp_path, lstm_data(32, 1), lstm_data(64, 2))
    QdqStage().run(Intermediate(model), QdqConfig(bound=AccuracyBound(max_accuracy_drop=50.0), backend="onnxruntime"), ctx)
    rep = ctx.record.report
    rows = rep["mode_search"]["candidates"]
    assert [r["mode"] for r in rows] == ["dynamic per-channel", "dynamic per-tensor", "static per-channel"]
    chosen = [r for r in rows if r["verdict"] == "chosen"]
    # the fastest, or one within the tie margin of it that has the smaller drop (choose_mode's tie rule)
    fastest = min(r["latency_ms"] for r in rows if "latency_ms" in r)
    assert len(chosen) == 1 and chosen[0]["latency_ms"] <= fastest * (1 + TIE) + 1e-9
    assert rep["mode"] == chosen[0]["mode"].split()[0] and rep["quantized"]["backend"] == "onnxruntime"
    assert rep["speed"]["speedup_vs_fp32"] is not None


def outlier_mlp(path: Path, width: int = 64, depth: int = 4, seed: int = 0) -> Path:
    """Gemm (with a bias), then MatMul, each + Tanh, ``depth`` layers: fed :func:`outlier_data`, whose feature 0 is
    300x the others, the first layer's input quantized per call (one scale for the whole tensor) loses the small
    features; the later ones see tanh's range and lose little. The first is a Gemm because ONNX Runtime's dynamic
    quantizer renames Gemms before it reads ``nodes_to_exclude``."""
    import onnx
    from onnx import TensorProto
    from onnx import helper as h
    from onnx import numpy_helper as nh

    rng = np.random.default_rng(seed)
    nodes, inits, cur = [], [], "x"
    for i in range(depth):
        inits.append(nh.from_array(rng.normal(0, 1 / np.sqrt(width), (width, width)).astype(np.float32), f"W{i}"))
        if i == 0:
            inits.append(nh.from_array(np.zeros(width, np.float32), "b0"))
        nodes += [h.make_node("Gemm", [cur, "W0", "b0"], ["m0"], name="fc0") if i == 0 else
                  h.make_node("MatMul", [cur, f"W{i}"], [f"m{i}"], name=f"fc{i}"),
                  h.make_node("Tanh", [f"m{i}"], [f"a{i}"], name=f"act{i}")]
        cur = f"a{i}"
    graph = h.make_graph(nodes, "outlier_mlp", [h.make_tensor_value_info("x", TensorProto.FLOAT, [1, width])],
                         [h.make_tensor_value_info(cur, TensorProto.FLOAT, [1, width])], inits)
    model = h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


def outlier_data(n: int, seed: int, width: int = 64) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, width)).astype(np.float32)
    x[:, 0] *= 300
    return x


@pytest.mark.onnxruntime
def test_dynamic_keeps_its_most_sensitive_op_in_float_when_no_mode_holds_as_built(tmp_path, cli):
    """Every mode as built misses the bound (dynamic per-channel 92 % top-1 agreement with FP32: the first MatMul's
    input has a 300x outlier feature); dynamic then goes on with ops in float, ranked by the error each brings alone,
    and keeps the first layer (a Gemm) in float (and one more op where the confidence bound on 300 held-back samples
    asks for it): the rest INT8, within the bound, named in the manifest and the text."""
    model = outlier_mlp(tmp_path / "mlp.onnx")
    np.savez(tmp_path / "cal.npz", x=outlier_data(32, 1))
    np.savez(tmp_path / "ev.npz", x=outlier_data(600, 2))  # 300 held back confirm a 2-point bound
    r = cli("convert", str(model), "--profile", "host", "--backend", "onnxruntime", "--precision", "int8",
            "--calib", str(tmp_path / "cal.npz"), "--eval", str(tmp_path / "ev.npz"), "--max-accuracy-drop", "4",
            "-o", str(tmp_path / "q"))  # 4: a few lost of 300 are within it at the default confidence
    assert r.returncode == 0, r.stderr
    rep = _quantize_report(tmp_path / "q", "qdq")
    rows = {row["mode"]: row for row in rep["mode_search"]["candidates"]}
    assert all(row["verdict"] == "dropped" and "over the bound" in row["why"] for row in rows.values())
    fallback = rep["mode_search"]["float_fallback"]
    kept = fallback["kept_in_float"]  # fc0 first; the confidence bound may ask for one more op in float
    assert kept[0] == "fc0" and len(kept) <= 2 and fallback["sensitivity"]["top"][0]["node"] == "fc0"
    assert rep["mode"] == "dynamic" and rep["quantized"]["quantized_units"] == 4 - len(kept)
    assert rep["quantized"]["float_units"] == len(kept)
    assert rep["mode_search"]["chosen"] == f"dynamic per-channel + {len(kept)} most sensitive op(s) in float"
    assert "accuracy_aware" not in rep  # the static search did not run
    assert f"then dynamic per-channel + {len(kept)} most sensitive op(s) in float" in r.stdout


# --------------------------------------------------------------------------- the per-channel crash (#23)
@pytest.mark.onnxruntime
@pytest.mark.realmodels
def test_per_channel_crash_on_magika_is_retried_per_tensor_for_the_failing_weight(tmp_path, monkeypatch):
    """ORT 1.32's quantize_static(per_channel=True) crashes on magika's byte classifier (ValueError in
    _adjust_weight_scale_for_int32_bias); the stage retries that weight per-tensor, names it, and goes on. Its
    symbolic shape inference fails too, and ONNX Runtime then writes temp files into the current directory:
    the user's folder stays as it was."""
    from edgeopt.converters.quantize import QdqConfig, QdqStage
    from fixtures.real_models import package_dir

    root = package_dir("magika")
    model = root / "models" / "standard_v3_3" / "model.onnx" if root else None
    if model is None or not model.is_file():
        pytest.skip("magika is not installed")
    rng = np.random.default_rng(0)
    data = Dataset({"bytes": rng.integers(0, 257, size=(16, 1, 2048)).astype(np.int32)}, ranks={"bytes": 2})
    user = tmp_path / "user"
    user.mkdir()
    monkeypatch.chdir(user)
    ctx = _ctx(tmp_path, data)
    out = QdqStage().run(Intermediate(model), QdqConfig(mode="static", calib_samples=8), ctx)
    assert list(user.iterdir()) == []
    retry = ctx.record.report["per_tensor_retry"]
    assert retry[0]["error"].startswith("ValueError") and retry[0]["node"] and retry[0]["retried"] == "this weight per-tensor"
    assert any("retried with this weight per-tensor for " + retry[0]["node"] in w for w in ctx.warnings)
    assert ctx.record.report["quantized"]["quantized_units"] >= 1 and out.path.is_file()



@pytest.mark.openvino
@pytest.mark.parametrize("met", [True, False])
def test_the_fallback_hit_is_judged_with_bf16_activations_where_the_cpu_runs_bf16(tmp_path, met):
    """When no mode holds as built, OpenVINO's static search finds a hit with units in float; where the CPU runs
    bf16, the same hit at the bf16 hint (its float units then in bf16) is judged by the search's own rules and, when
    it holds, timed against it (rapidocr's recogniser and DBNet on an AMX Xeon: 50 and 56 units float at f32)."""
    import openvino as ov

    from edgeopt.converters.backends.openvino.stage import OpenVINOConfig, _hit_with_bf16_activations
    from edgeopt.converters.quantize.candidate import Candidate

    q = ov.convert_model(str(tiny_lstm(tmp_path / "lstm.onnx")))
    judged = []

    class Result:
        @staticmethod
        def judge(run):
            judged.append(run(lstm_data(1, 0).feed(0)))
            return Candidate("", search_value=99.0, confirm_value=99.0 if met else None, met=met)

    config = OpenVINOConfig(precision="int8", int8_activation_hints=("bf16",))
    report: dict = {}
    run = _hit_with_bf16_activations(ov.Core(), q, ["x"], ["y"], config, Result, report, 1)
    if not bf16_here():
        assert run is None and not judged and "can't be checked here" in report["int8_activation_hints_skipped"]
        return
    assert len(judged) == 1 and judged[0]["y"].shape == (1, 8)  # the hit, run at bf16, judged once
    assert report["bf16_activations"]["met"] is met and (run is not None) is met
    assert _hit_with_bf16_activations(ov.Core(), q, ["x"], ["y"], OpenVINOConfig(precision="int8"), Result, {}, 1) \
        is None  # not planned (a profile without native bf16): not tried


def test_candidates_tied_in_speed_are_decided_by_their_drop():
    """Within 5 % of the fastest the quick timing can't order them (one configuration compiled twice timed 5 %
    apart): the smaller drop on all the eval samples wins; a clear lead still wins whatever the drop."""
    from edgeopt.converters.quantize.bound import _best_of

    drops = {"static, bf16 activations": 0.794, "weights, bf16 activations": 0.0, "weights": 0.0}
    latency = {"static, bf16 activations": 0.170, "weights, bf16 activations": 0.174, "weights": 0.45}
    best, tied = _best_of(list(drops), latency, drops)
    assert best == "weights, bf16 activations" and set(tied) == {"static, bf16 activations", best}
    latency["weights, bf16 activations"] = 0.19  # 12 % slower: not a tie
    assert _best_of(list(drops), latency, drops) == ("static, bf16 activations", ["static, bf16 activations"])
