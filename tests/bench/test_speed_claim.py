"""One clock for every speed claim: convert's quick timings call bench's own measuring function, and the speed-up
convert prints is the one measured on the written artifact (``edgeopt/speed_claim.py``), the estimate beside it.
No assertion here depends on a timing: measurements are counted or replaced by fixed figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fixtures_convert import make_ort_artifact

from edgeopt.enums import BackendName, ClaimSource

REPO = Path(__file__).resolve().parents[2]
MNIST = REPO / "fixtures" / "models" / "mnist_cnn.onnx"
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"
MNIST_CALIB = REPO / "fixtures" / "data" / "mnist_calib.npz"
MNIST_TEST = REPO / "fixtures" / "data" / "mnist_test.npz"


@pytest.fixture
def calls(monkeypatch):
    """Every call of bench's measuring function (``measure_interleaved``), recorded, the real one still run."""
    import edgeopt.runtime.measure as measure

    real, seen = measure.measure_interleaved, []

    def recording(fns, **kw):
        seen.append({"n": len(fns), **kw})
        return real(fns, **kw)

    monkeypatch.setattr(measure, "measure_interleaved", recording)
    return seen


def test_search_timing_and_bench_call_the_same_function(calls, tmp_path):
    """The search's timings (both helpers) and ``edgeopt bench`` go through one measuring function, with bench's
    warm-up: the same clock for the estimate and for the benchmark."""
    from edgeopt.bench.api import BenchOptions, bench_artifacts
    from edgeopt.runtime.quick_timing import blocked_latency_ms, interleaved_latency_ms

    runs = {"a": lambda feed: np.sum(feed["x"]), "b": lambda feed: np.max(feed["x"])}
    feed = {"x": np.ones(8, dtype=np.float32)}
    blocked = blocked_latency_ms(runs, feed, calls=2, rounds=2, target_s=None)
    interleaved = interleaved_latency_ms(runs, feed, repeats=3)
    assert set(blocked) == set(interleaved) == {"a", "b"}
    bench_artifacts([make_ort_artifact(tmp_path / "art")],
                    BenchOptions(min_runs=3, min_seconds=0, warmup=BenchOptions().warmup, store=False))
    assert len(calls) == 3
    assert [c["n"] for c in calls] == [2, 2, 1]
    assert {c["warmup"] for c in calls} == {BenchOptions().warmup}
    assert calls[0]["min_runs"] == 4 and calls[1]["min_runs"] == 3


def _fake_bench(art_ms: float, ref_ms: float, runs: int = 50):
    def run_bench(paths, **_kw):
        assert len(paths) == 2
        return {"rows": [{"latency_ms": {"p50": art_ms}, "runs": runs},
                         {"latency_ms": {"p50": ref_ms}, "runs": runs + 7}]}
    return run_bench


@pytest.mark.parametrize(("estimate", "agree"), [(1.3, False), (2.0 * 0.7, False), (1.95, True), (2.15, True)])
def test_measured_figure_kept_and_warned_when_apart(monkeypatch, tmp_path, estimate, agree):
    """The written artifact's figure (reference p50 / artifact p50) is kept beside the estimate; a warning when the
    two are more than 10 % apart (an estimate 30 % off), none within."""
    import edgeopt.speed_claim as sc
    from edgeopt.speed_claim import measure_claim

    monkeypatch.setattr(sc, "run_bench", _fake_bench(1.0, 2.0))
    c = measure_claim(tmp_path, DIGITS, (ClaimSource.INT8_VERDICT, estimate, BackendName.ONNXRUNTIME.value),
                      threads=None, inputs=None)
    assert (c.estimate, c.measured, c.artifact_ms, c.reference_ms, c.runs) == (estimate, 2.0, 1.0, 2.0, 50)
    assert c.agree is agree
    assert (c.warning is None) is agree
    if not agree:
        assert f"x{estimate:g}" in c.warning and "x2" in c.warning


def _bench_processes(*pairs):
    """A fake ``run_bench`` whose successive processes read (artifact p50, reference p50) from ``pairs``; the calls
    are counted in its ``calls`` list."""
    queue, calls = list(pairs), []

    def run_bench(paths, **_kw):
        calls.append(paths)
        art, ref = queue.pop(0)
        return {"rows": [{"latency_ms": {"p50": art}, "runs": 40 + len(calls)},
                         {"latency_ms": {"p50": ref}, "runs": 90}]}
    run_bench.calls = calls
    return run_bench


def test_a_process_that_runs_at_another_speed_is_outvoted_by_two_more(monkeypatch, tmp_path):
    """An artifact that runs at one of two speeds for a whole process: the first bench process read x1.219 (20.9 ms
    against 25.4 ms) where the search estimated x1.003, so two more processes run and the median one (x1.01) is the
    claim, with its own p50s and runs; every process's figure is kept and no warning is said."""
    import edgeopt.speed_claim as sc
    from edgeopt.speed_claim_model import PROCESSES

    fake = _bench_processes((20.8622, 25.4207), (12.5, 12.5), (22.0, 22.22))
    monkeypatch.setattr(sc, "run_bench", fake)
    c = sc.measure_claim(tmp_path, DIGITS, (ClaimSource.INT8_VERDICT, 1.003, BackendName.ONNXRUNTIME.value),
                         threads=None, inputs=None)
    assert len(fake.calls) == PROCESSES == 3
    assert c.processes == [1.219, 1.0, 1.01]
    assert (c.measured, c.artifact_ms, c.reference_ms, c.runs) == (1.01, 22.0, 22.22, 43)
    assert c.agree and c.warning is None


def test_one_process_when_it_agrees_and_every_reading_named_when_none_does(monkeypatch, tmp_path):
    """A first bench process within 10 % of the estimate is the claim on its own; when three disagree with it, the
    warning names each process's reading and says the median is printed."""
    import edgeopt.speed_claim as sc

    fake = _bench_processes((1.0, 1.25))
    monkeypatch.setattr(sc, "run_bench", fake)
    c = sc.measure_claim(tmp_path, DIGITS, (ClaimSource.INT8_VERDICT, 1.2, BackendName.ONNXRUNTIME.value),
                         threads=None, inputs=None)
    assert len(fake.calls) == 1 and c.processes == [1.25] and c.measured == 1.25 and c.agree
    fake = _bench_processes((1.0, 1.0), (1.0, 0.9), (1.0, 1.1))
    monkeypatch.setattr(sc, "run_bench", fake)
    c = sc.measure_claim(tmp_path, DIGITS, (ClaimSource.BACKEND_AUTO, 1.6, BackendName.ONNXRUNTIME.value),
                         threads=None, inputs=None)
    assert len(fake.calls) == 3 and c.measured == 1.0 and not c.agree
    assert "x1, x0.9, x1.1 (the median is printed)" in c.warning and "x1.6" in c.warning


def test_the_claim_is_edgeopt_bench_in_its_own_process_and_says_when_the_machine_was_busy(monkeypatch, tmp_path):
    """The claim is ``edgeopt bench ARTIFACT REFERENCE --no-store --json`` run as a user runs it (its own process,
    bench's defaults), ``--threads`` and ``--inputs`` passed on; bench's line about other processes on the CPUs
    travels with the claim; a bench that fails is an error (convert then keeps the estimate, said as such)."""
    import subprocess

    import edgeopt.speed_claim as sc
    from edgeopt.errors import EdgeoptError

    seen = []

    def fake_run(argv, **_kw):
        seen.append(argv)
        rows = [{"latency_ms": {"p50": 1.0}, "runs": 60}, {"latency_ms": {"p50": 2.0}, "runs": 70}]
        env = {"interference": {"other_busy_pct": 60.0, "steal_pct": 0.0}}
        return subprocess.CompletedProcess(argv, 0, json.dumps({"rows": rows, "environment": env}) + "\n", "")

    monkeypatch.setattr(subprocess, "run", fake_run)
    c = sc.measure_claim(tmp_path, DIGITS, (ClaimSource.INT8_VERDICT, 1.2, BackendName.ONNXRUNTIME.value),
                         threads=3, inputs="x.npz")
    argv = seen[0]
    assert argv[1:4] == ["-m", "edgeopt", "bench"] and str(tmp_path) == argv[4]
    assert {"--no-store", "--json"} <= set(argv) and "--min-seconds" not in argv and "--warmup" not in argv
    assert argv[argv.index("--threads") + 1] == "3" and argv[argv.index("--inputs") + 1] == "x.npz"
    assert (c.measured, c.runs) == (2.0, 60)
    assert c.busy and "other processes used 60 %" in c.busy and c.busy in c.warning
    monkeypatch.setattr(subprocess, "run", lambda argv, **_kw: subprocess.CompletedProcess(
        argv, 3, json.dumps({"error": {"message": "inputs refused"}}), ""))
    with pytest.raises(EdgeoptError) as err:
        sc.run_bench(["a", "b"], threads=None, inputs=None)
    assert "inputs refused" in err.value.message


def _manifest(**update):
    from edgeopt.bench.api import reference_manifest
    from edgeopt.files import file_sha256

    m = reference_manifest(DIGITS, file_sha256(DIGITS))
    return type(m).model_validate({**m.model_dump(mode="json"), **update})  # stages and rows typed as convert's


def test_the_claim_read_from_the_manifest():
    """--backend auto's chosen row is the claim (vs ONNX Runtime FP32); else the last speed verdict in the stage
    reports, measured against FP32 in the artifact's runtime; a runtime with no reference here is not checked."""
    from edgeopt.speed_claim import claimed

    stages = [{"name": "qdq", "report": {"speed": {"speedup_vs_fp32": 0.9},
                                              "mode_search": {"speed": {"speedup_vs_fp32": 1.4}}}}]
    assert claimed(_manifest(stages=stages)) == (ClaimSource.INT8_VERDICT, 1.4, "onnxruntime")
    assert claimed(_manifest(stages=stages, backend="tflite")) is None
    assert claimed(_manifest()) is None
    rows = [{"backend": "onnxruntime", "verdict": "dropped", "speedup_vs_reference": 1.1},
            {"backend": "openvino", "verdict": "chosen", "speedup_vs_reference": 1.7}]
    assert claimed(_manifest(stages=stages, backend="openvino", backend_search=rows)) == (
        ClaimSource.BACKEND_AUTO, 1.7, "onnxruntime")


def test_printed_speedup_is_the_measured_one():
    """convert's lines print the measured speed-up first and the estimate beside it; the INT8 verdict uses it."""
    from edgeopt.cli.artifact_text import backend_search_text, speed_claim_text
    from edgeopt.int8_verdict import int8_verdict

    claim = {"source": "backend_auto", "reference": "ref", "estimate": 0.93, "measured": 1.04, "artifact_ms": 1.0,
             "reference_ms": 1.04, "runs": 50, "agree": False}
    text = speed_claim_text(claim)
    assert text.startswith("speed: x1.04") and "estimate x0.93" in text and "NOT within" in text
    assert "bench processes" not in text
    text = speed_claim_text({**claim, "processes": [1.22, 1.04, 1.0]})
    assert "the median of 3 bench processes: x1.22, x1.04, x1" in text
    row = {"backend": "openvino", "verdict": "chosen", "why": "fastest", "latency_ms": 2.0,
           "speedup_vs_reference": 0.93}
    assert "x1.04 ONNX Runtime FP32 measured" in backend_search_text(row, claim)
    assert "x0.93" in backend_search_text(row)
    units = {"file": "model.onnx", "quantized": 1, "float": 9}
    stages = [{"report": {"speed": {"speedup_vs_fp32": 0.93}}}]
    assert int8_verdict("int8", units, stages, measured=1.2) is None
    assert "x0.97" in int8_verdict("int8", units, stages, measured=0.97)


@pytest.mark.slow
@pytest.mark.onnxruntime
def test_convert_records_both_figures_of_the_written_artifact(cli, tmp_path):
    """A real convert with a speed verdict: the manifest keeps the search's estimate and the written artifact's
    figure, and --json prints the same record (whatever the figures are on this machine)."""
    out = tmp_path / "art"
    p = cli("convert", str(MNIST), "--profile", "host", "--backend", "onnxruntime", "--precision", "int8",
            "--max-accuracy-drop", "2", "--calib", str(MNIST_CALIB), "--eval", str(MNIST_TEST), "-o", str(out),
            "--json")
    assert p.returncode == 0, p.stderr
    printed = json.loads(p.stdout)["speed_claim"]
    manifest = json.loads((out / "manifest.json").read_text())
    claim = manifest["speed_claim"]
    assert printed == claim and claim["source"] == "int8_verdict"
    speeds = [s["report"] for s in manifest["stages"] if s["name"] == "qdq"]
    from edgeopt.speed_claim import _last_speed

    assert claim["estimate"] == _last_speed(speeds)["speedup_vs_fp32"]
    assert claim["measured"] == pytest.approx(claim["reference_ms"] / claim["artifact_ms"], rel=2e-3)
    assert claim["runs"] >= 20
    assert (claim["warning"] is None) is claim["agree"]
    assert (claim["warning"] in manifest["warnings"]) if claim["warning"] else True


@pytest.mark.openvino
def test_an_openvino_verdict_is_measured_beside_the_model_in_openvino(tmp_path):
    """An OpenVINO verdict's FP32 is OpenVINO at the f32 hint: the reference is the given model read by OpenVINO,
    measured by bench beside the artifact, and kept in edgeopt's cache, so bench of the two repeats the claim."""
    from fixtures_convert import make_openvino_artifact

    from edgeopt.files import file_sha256
    from edgeopt.speed_claim import measure_claim

    art = make_openvino_artifact(tmp_path / "ov")
    c = measure_claim(art, DIGITS, (ClaimSource.INT8_VERDICT, 1.0, BackendName.OPENVINO.value), threads=1, inputs=None)
    assert "judged against in OpenVINO at INFERENCE_PRECISION_HINT f32" in c.reference
    assert c.runs >= 20 and c.threads == 1
    # the figures are stored rounded (ms to 4 places, the ratio to 3): a fast CPU's 0.02 ms moves the ratio by 0.4 %
    assert c.measured == pytest.approx(c.reference_ms / c.artifact_ms,
                                       rel=1e-3 + 1e-4 / min(c.artifact_ms, c.reference_ms), abs=1e-3)
    ref = json.loads((Path(c.reference_artifact) / "manifest.json").read_text())
    assert ref["backend"] == "openvino" and ref["runtime"]["settings"] == {"inference_precision": "f32"}
    assert ref["source_model"]["sha256"] == file_sha256(DIGITS)


@pytest.mark.slow
@pytest.mark.openvino
def test_an_int8_verdict_is_claimed_against_the_fp32_model_it_was_judged_against(monkeypatch, tmp_path):
    """convert's INT8 verdict times the INT8 candidate against the normalized FP32 model; the written artifact's
    claim is measured against that same model (not the user's file, whose slower graph would credit the
    normalization to INT8), in the artifact's runtime, and the claim names the cached reference bench repeats."""
    import edgeopt.speed_claim as sc
    from edgeopt.convert import convert
    from edgeopt.files import file_sha256

    seen = []

    def fake_bench(paths, **_kw):
        seen.append(paths)
        return {"rows": [{"latency_ms": {"p50": 1.0}, "runs": 50}, {"latency_ms": {"p50": 1.5}, "runs": 50}]}

    monkeypatch.setattr(sc, "run_bench", fake_bench)
    monkeypatch.setattr(sc, "claimed", lambda m: (ClaimSource.INT8_VERDICT, 1.5, m.backend))
    out = tmp_path / "art"
    r = convert(MNIST, "host", out, backend="openvino", precision="int8", calib=MNIST_CALIB, eval=MNIST_TEST,
                max_accuracy_drop=2.0)
    claim = r.manifest.speed_claim
    assert claim is not None and seen and seen[0][1] == claim.reference_artifact
    ref = json.loads((Path(claim.reference_artifact) / "manifest.json").read_text())
    assert ref["backend"] == "openvino" and ref["runtime"]["settings"] == {"inference_precision": "f32"}
    assert ref["source_model"]["sha256"] != file_sha256(MNIST)  # the normalized model, not the user's file
    assert "judged against" in claim.reference and claim.measured == 1.5


def test_a_measurement_that_fails_leaves_the_estimate_said_as_such(monkeypatch, tmp_path):
    """The artifact holds; when bench can't measure it (inputs refused), convert keeps it and says the speed-up is
    the search's estimate only."""
    import edgeopt.speed_claim as sc
    from edgeopt.errors import BadInputError
    from edgeopt.speed_claim import check_speed_claim

    def refuse(*_a, **_k):
        raise BadInputError("failed to run on inputs")

    monkeypatch.setattr(sc, "run_bench", refuse)
    said = []
    stages = [{"name": "qdq", "report": {"speed": {"speedup_vs_fp32": 1.4}}}]
    assert check_speed_claim(tmp_path, _manifest(stages=stages), DIGITS, threads=None, inputs=None,
                             warn=said.append) is None
    assert len(said) == 1 and "x1.4 is the search's estimate only" in said[0]


def test_the_search_speed_warning_says_it_is_an_estimate_and_that_the_printed_figure_is_measured():
    """The INT8 search's "no faster" line is labelled a quick estimate timed before the artifact was written, and
    points at the measured figure convert prints."""
    from edgeopt.converters.quantize.speed_verdict import speed_verdict

    warned = []

    class Ctx:
        def warn(self, msg):
            warned.append(msg)

    entry = speed_verdict({"fp32": 1.0, "int8": 1.25}, final_key="int8", runtime="onnxruntime", min_speedup=None,
                          ctx=Ctx(), prefix="onnxruntime")
    assert entry["speedup_vs_fp32"] == 0.8 and warned == [entry["warning"]]
    assert "quick estimate before the artifact was written" in warned[0] and "measured on the written" in warned[0]
