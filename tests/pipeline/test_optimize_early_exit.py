"""optimize's early-exit step: which candidates it builds (the incumbent and the best of the other kind, INT8 or
float), when it does not apply, and that a measurement with a cascade in it runs the same samples in turn."""

from __future__ import annotations

import numpy as np

from edgeopt.optimize.candidate_bench import CandidateBench
from edgeopt.optimize.early_exit import STEP, cycling_run, early_exit_step
from edgeopt.optimize.result import Candidate
from edgeopt.profiles import load_profile
from fixtures import fixture_data, fixture_model


def _search(calib=True, eval=True):
    s = CandidateBench(fixture_model("digits_cnn"), load_profile("host"), 1.0,
                str(fixture_data("digits_calib")) if calib else None,
                str(fixture_data("digits_test")) if eval else None, {}, 0.0, lambda _m: None)
    s.asked = []

    def step(name, inc, options, prefer_new=0.0):  # records what would be built; builds nothing
        s.asked.append((name, options))
        s.tried.setdefault(name, [])
        return inc

    s.step = step
    return s


def _cand(step, backend, precision, p50, feasible=True):
    return Candidate(step=step, label=f"{backend} {precision}", target={"backend": backend, "precision": precision},
                     artifact="/nowhere", p50_ms=p50, feasible=feasible)


def test_early_exit_is_tried_on_the_float_incumbent_and_on_the_fastest_int8_within_the_bound():
    s = _search()
    inc = _cand("float", "onnxruntime", "fp32", 1.0)
    s.tried["int8"] = [_cand("int8", "openvino", "int8", 0.4), _cand("int8", "onnxruntime", "int8", 0.5),
                       _cand("int8", "onnxruntime", "int8", 0.1, feasible=False)]
    trail = []
    assert early_exit_step(s, inc, inc, trail) is inc
    (name, options), = s.asked
    assert name == STEP
    assert [(f["backend"], f["precision"], f["early_exit"]) for _, f in options] == [
        ("onnxruntime", "fp32", "auto"), ("openvino", "int8", "auto")]
    assert all(label.endswith("early-exit") for label, _ in options)


def test_an_int8_incumbent_gets_exits_with_and_without_int8():
    s = _search()
    inc = _cand("int8", "onnxruntime", "int8", 0.4)
    before = _cand("fusion", "onnxruntime", "fp32", 1.0)
    s.tried["int8"] = [inc, _cand("int8", "openvino", "int8", 0.6)]
    s.tried["float"] = [_cand("float", "openvino", "bf16", 0.8)]
    early_exit_step(s, inc, before, [])
    assert [(f["backend"], f["precision"]) for _, f in s.asked[0][1]] == [("onnxruntime", "int8"),
                                                                          ("openvino", "bf16")]


def test_a_tflite_int8_incumbent_gets_exits_on_its_own_int8_stages_and_on_float():
    s = _search()
    inc = _cand("int8", "tflite", "int8", 0.3)
    s.tried["int8"] = [inc, _cand("int8", "openvino", "int8", 0.5)]
    early_exit_step(s, inc, _cand("fusion", "onnxruntime", "fp32", 1.0), [])
    assert [(f["backend"], f["precision"]) for _, f in s.asked[0][1]] == [("tflite", "int8"),
                                                                          ("onnxruntime", "fp32")]
    assert not s.skipped
    s = _search(eval=False)
    early_exit_step(s, _cand("fusion", "onnxruntime", "fp32", 1.0), None, [])
    assert not s.asked and any("needs --calib" in n and "--eval" in n for n in s.skipped)


def test_a_measurement_with_a_cascade_cycles_through_the_same_samples():
    seen = []

    class Runner:
        def run(self, feeds):
            seen.append(feeds["input"].copy())

    data = np.load(fixture_data("digits_test"))
    run = cycling_run(Runner(), [{"name": "input", "shape": [1, *data["input"].shape[1:]], "dtype": "float32"}],
                      str(fixture_data("digits_test")))
    for _ in range(3):
        run()
    assert [s.shape[0] for s in seen] == [1, 1, 1]
    assert np.array_equal(seen[0], data["input"][:1]) and np.array_equal(seen[2], data["input"][2:3])


def test_a_build_that_kept_no_exit_is_out_of_the_running_and_says_why(tmp_path):
    s = _search()
    inc = _cand("float", "onnxruntime", "fp32", 1.0)
    plain = tmp_path / "plain"
    plain.mkdir()  # an artifact without cascade.json: the convert wrote the plain model

    def step(name, incumbent, options, prefer_new=0.0):
        c = _cand(name, "onnxruntime", "fp32", 0.9)  # measured faster than its base: noise, the same model
        c.artifact = str(plain)
        s.tried.setdefault(name, []).append(c)
        return c

    s.step = step
    trail = []
    assert early_exit_step(s, inc, inc, trail) is inc
    (_, c, kept), = trail
    assert not kept and not c.feasible and "no exit kept" in c.label and "plain model" in c.note


def test_the_longest_label_still_names_a_valid_target():
    """Pruned, INT8 with its calibration and early exit together make a label over the 64 characters a target name
    may have (optimize crashed with a ValidationError on digits): the name keeps its start and a hash of the whole,
    so two such labels still name two targets."""
    from edgeopt.optimize.candidates import NAME_MAX, target_name
    from edgeopt.pipeline.recipe import Target

    long = "onnxruntime int8 static percentile prune 20% no-recover early-exit"
    other = long.replace("percentile", "percentile aa")
    assert len(long.replace(" ", "-").replace("%", "pct")) > NAME_MAX and len(other) > len(long)
    names = {target_name(long), target_name(other)}
    assert len(names) == 2 and all(len(n) <= NAME_MAX for n in names)
    assert all(Target(name=n).name == n for n in names)
    assert target_name("onnxruntime fp32") == "onnxruntime-fp32"
