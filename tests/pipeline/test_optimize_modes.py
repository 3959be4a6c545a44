"""``optimize`` searches INT8 modes x backends and native float precisions: which
candidates a recurrent and a convolutional graph get, why a candidate was dropped, and a real search on a tiny
LSTM whose waterfall shows every mode x backend tried with its speed, its metric vs the bound and its verdict.

Models: a small LSTM + Linear built with ``onnx.helper`` (random weights: its metric is agreement with FP32),
and the digits CNN fixture."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_quant_modes import tiny_lstm

from edgeopt.profiles import load_profile

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"


def _modes(options: list[dict]) -> set[tuple]:
    return {(f["backend"], f.get("quant_mode"), f.get("calib_method")) for f in options}


def test_a_recurrent_graph_gets_dynamic_and_weight_only_beside_static_on_each_backend(tmp_path):
    import onnx

    from edgeopt.optimize.candidates import int8_options

    base = {"prune": 0.2}
    options, notes = int8_options(onnx.load(str(tiny_lstm(tmp_path / "lstm.onnx"))), ["onnxruntime", "openvino"], base)
    assert _modes(options) == {("onnxruntime", "dynamic", None), ("onnxruntime", "static", "minmax"),
                               ("onnxruntime", "static", "percentile"), ("openvino", "weights", None),
                               ("openvino", "static", None)}
    assert all(f["precision"] == "int8" and f["prune"] == 0.2 for f in options)  # on the incumbent's model
    assert notes == []  # every mode each backend offers fits a recurrent graph


def test_a_cnn_gets_static_only_and_says_why_the_other_modes_were_not_tried():
    import onnx

    from edgeopt.optimize.candidates import int8_options

    options, notes = int8_options(onnx.load(str(DIGITS)), ["onnxruntime", "openvino", "tvm"], {})
    assert _modes(options) == {("onnxruntime", "static", "minmax"), ("onnxruntime", "static", "percentile"),
                               ("openvino", "static", None), ("tvm", "static", "minmax"), ("tvm", "static", "percentile")}
    assert any(n.startswith("int8 onnxruntime: dynamic not tried: a convolutional model") for n in notes)
    assert any(n.startswith("int8 openvino: weights not tried: a convolutional model") for n in notes)


def test_native_float_precisions_are_candidates_on_each_backend_but_the_incumbents_own():
    from edgeopt.optimize.candidates import float_options

    got = float_options(load_profile("x86-avx512"), ["openvino", "onnxruntime"], {"prune": 0.1})
    assert [(f["backend"], f["precision"]) for f in got] == [("openvino", "bf16"), ("openvino", "fp32")]
    got = float_options(load_profile("pi5"), ["tflite", "onnxruntime"], {})
    assert [(f["backend"], f["precision"]) for f in got] == [("tflite", "fp16"), ("tflite", "fp32"),
                                                             ("onnxruntime", "fp16")]


def test_why_a_candidate_was_dropped_names_its_figures():
    from edgeopt.optimize.candidates import dropped_why
    from edgeopt.optimize.result import Candidate

    win = Candidate(step="int8", label="onnxruntime int8 dynamic", target={}, p50_ms=1.0, accuracy_drop=0.2,
                    feasible=True)
    slow = Candidate(step="int8", label="openvino int8 static", target={}, p50_ms=2.5, accuracy_drop=0.0,
                     feasible=True)
    over = Candidate(step="int8", label="openvino int8 weights", target={}, p50_ms=0.5, accuracy_drop=3.0)
    broke = Candidate(step="int8", label="tflite int8 static", target={}, error="tflite: calibration failed")
    assert dropped_why(win, win, 1.0) == "chosen: the fastest within the bound"
    assert dropped_why(slow, win, 1.0) == "slower: 2.5000 ms vs 1.0000 ms (onnxruntime int8 dynamic)"
    assert dropped_why(over, win, 1.0) == "over the bound: drop 3.00 > 1 points"
    assert dropped_why(broke, win, 1.0) == "failed to build: tflite: calibration failed"
    spread = Candidate(step="int8", label="onnxruntime int8 dynamic", target={}, p50_ms=0.4, accuracy_drop=0.73,
                       halves_drop_p90=1.52)
    assert dropped_why(spread, win, 1.0) == ("over the bound on random halves of the eval data: drop 0.73 on all of "
                                             "it but 1.52 > 1 points on 1 in 10 halves")


@pytest.mark.slow
@pytest.mark.openvino
def test_optimize_on_a_recurrent_model_tries_each_mode_x_backend_and_shows_each_in_the_waterfall(tmp_path, cli):
    model = tiny_lstm(tmp_path / "lstm.onnx")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "calib.npz", x=rng.normal(size=(32, 1, 20, 16)).astype(np.float32))
    np.savez(tmp_path / "eval.npz", x=rng.normal(size=(64, 1, 20, 16)).astype(np.float32))
    env = {"EDGEOPT_CACHE_DIR": str(tmp_path / "cache"), "EDGEOPT_DATA_DIR": str(tmp_path / "data")}
    r = cli("optimize", str(model), "--profile", "host", "--max-accuracy-drop", "5", "--calib",
            str(tmp_path / "calib.npz"), "--eval", str(tmp_path / "eval.npz"), "--time-budget", "6", "--json", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)
    rows = [w for w in res["waterfall"] if w["step"] == "int8"]
    tried = {(c["target"]["backend"], c["target"].get("quant_mode")) for c in res["candidates"] if c["step"] == "int8"}
    assert {("onnxruntime", "dynamic"), ("onnxruntime", "static"), ("openvino", "weights"),
            ("openvino", "static")} <= tried  # a recurrent graph: dynamic and weight-only beside static
    assert len(rows) == sum(1 for c in res["candidates"] if c["step"] == "int8")  # each tried is a row
    assert "onnxruntime int8 dynamic" in [w["label"] for w in rows]  # no calibration method: it calibrates nothing
    if any(w["within_bound"] for w in rows):  # the accuracy-aware fallback only when no mode held the bound
        assert not any(w["label"].endswith("aa") for w in rows)
    for w in rows:
        assert w["why"]  # chosen, slower (with both figures), over the bound (with its drop), or failed
        if not w.get("error"):
            assert w["p50_ms"] > 0 and w["accuracy_drop"] is not None
            assert w["within_bound"] == (w["accuracy_drop"] <= 5)
    win = res["winner"]
    assert win["feasible"] and win["p50_ms"] == min(c["p50_ms"] for c in res["candidates"]
                                                     if c["feasible"] and c["p50_ms"] is not None)
    assert [w["label"] for w in res["waterfall"] if w["why"].startswith("chosen")] == [win["label"]]  # a row
    from edgeopt.enums import Precision
    from edgeopt.float_precisions import native_float_precisions

    if Precision.BF16 in native_float_precisions(load_profile("host"), "openvino"):  # AMX/AVX512-BF16 here
        bf16 = next(w for w in res["waterfall"] if w["step"] == "float" and w["label"] == "openvino bf16")
        assert bf16["why"] and (bf16.get("error") or bf16["accuracy_drop"] is not None)


@pytest.mark.onnxruntime
def test_optimize_times_onnx_runtime_candidates_with_their_pool_threads_asleep_between_calls(tmp_path):
    from edgeopt.convert import convert
    from edgeopt.optimize.candidate_bench import CandidateBench
    from edgeopt.runtime.runners import open_runner

    art = tmp_path / "ort"
    convert(DIGITS, "host", art, backend="onnxruntime", precision="fp32")
    s = CandidateBench(DIGITS, load_profile("host"), 1.0, None, None, {}, 0.0, lambda _m: None)
    assert _spinning(s._runner(str(art)).session) == "0"  # the runner optimize times: pool threads sleep
    with open_runner(str(art)) as shipped:  # the artifact itself is unchanged: it runs as ONNX Runtime defaults
        assert "allow_spinning" not in json.loads((art / "manifest.json").read_text())["runtime"]["settings"]
        assert _spinning(shipped.session) is None
    s.close()


def _spinning(session) -> str | None:
    try:
        return session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning")
    except Exception:  # noqa: BLE001 - not set: ONNX Runtime's default (spinning)
        return None


def test_pruning_starts_from_the_fused_graph_whatever_the_fusion_step_measured():
    from edgeopt.optimize.candidates import folded

    assert folded({"backend": "onnxruntime", "stages": {"normalize": {"fold": False}}, "prune": "auto"}) == \
        {"backend": "onnxruntime", "prune": "auto"}
    assert folded({"stages": {"normalize": {"fold": False, "min_opset": 13}, "tvm": {"x": 1}}}) == \
        {"stages": {"normalize": {"min_opset": 13}, "tvm": {"x": 1}}}
