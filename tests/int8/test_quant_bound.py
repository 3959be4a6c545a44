"""Acceptance under ``--max-accuracy-drop`` (the device matrix's held-back misses): every INT8 search confirms
through one judge (``BudgetedSearch.judge``), which takes a candidate only when the upper confidence limit of its
drop (``edgeopt.metrics.confidence``: Tango's paired limit for a metric that counts samples, a seeded bootstrap for
the others) is within the bound on the held-back part and on all the eval samples, the convert gate's judgement
too. A candidate that flips 4 of 300 held-back samples (1.33 points, within a 2-point bound as a point and with
one sample of room) is up to 2.81 points worse at the held-back look's confidence, and is refused.

The models are tiny and deterministic: a linear scorer whose last input column is a marker the FP32 model
ignores; a "candidate" flips the top-1 class of exactly the marked samples.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.data import Dataset

C = 5  # classes
N = 600  # eval samples: 300 searched, 300 held back


def _data(n: int = N, seed: int = 0) -> tuple[Dataset, np.ndarray]:
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((C, C)).astype(np.float32)
    w[-1] = 0.0  # the marker column: FP32 ignores it
    x = rng.standard_normal((n, 1, C)).astype(np.float32)
    x[..., -1] = 0.0
    return Dataset({"x": x}, ranks={"x": 2}), w


def _mark(part: Dataset, count: int, value: float = 1.0) -> None:
    part.arrays["x"][:count, 0, -1] = value


def _runs(w):
    def fp32(feed):
        return {"y": feed["x"] @ w}

    def candidate(feed):  # the top-1 class of a marked sample is flipped (the scores negated)
        y = feed["x"] @ w
        return {"y": -y if float(feed["x"][0, -1]) > 0.5 else y}

    return fp32, candidate


def _parts(in_search: int, in_held: int):
    ds, w = _data()
    search, confirm = ds.split(0.5, seed=0)
    _mark(search, in_search, 1.0)
    _mark(confirm, in_held, 2.0)  # a marker of its own: a candidate may flip the searched ones only
    return search, confirm, *_runs(w)


def test_a_drop_within_the_bound_as_a_point_is_refused_as_a_bound():
    """No flip on the 300 searched samples (selected: up to 0.76 points there), 4 of the 300 held back: 1.33 points,
    within a 2-point bound as a point (and with one sample of room, the old rule), but up to 2.92 points at the
    held-back look's confidence. The held-back part confirms the search's choice once: not confirmed, the search
    ends without a result, and the gate failure says why. One flip held back (up to 1.49) is confirmed."""
    from edgeopt.converters.quantize.strategy import run_search
    from edgeopt.converters.quantize.verdict import gate_failure

    search, confirm, fp32, lucky = _parts(0, 4)
    result = run_search(options=[("lucky", lambda: ("lucky", lucky))], rank=None, with_float=None, fp32_run=fp32,
                        search=search, confirm=confirm, bound=2.0, budget_s=3600, confidence=0.9)
    [row] = result.report["tried"]
    assert (row["search_drop_points"], row["confirm_drop_points"]) == (0.0, 1.333)
    assert row["selected"] is True and row["met"] is False
    assert row["search_drop_upper"] == pytest.approx(0.765, abs=1e-3)
    assert row["confirm_drop_upper"] == pytest.approx(2.921, abs=1e-3)
    assert result.best is None and result.report["confirm_looks"] == 1
    msg = gate_failure("qdq", result, 2.0).one_line()
    assert "not confirmed on the held-back part (lucky: drop 1.33 points on the held-back part, up to 2.92" in msg
    assert "Tango's paired score limit" in result.report["acceptance"] and result.report["confidence"] == 0.9

    search, confirm, fp32, one = _parts(0, 1)
    result = run_search(options=[("one", lambda: ("one", one))], rank=None, with_float=None, fp32_run=fp32,
                        search=search, confirm=confirm, bound=2.0, budget_s=3600, confidence=0.9)
    assert result.best is not None and result.report["confirm_drop_upper"] == pytest.approx(1.493, abs=1e-3)


def test_a_choice_not_confirmed_is_a_miss_and_the_float_fallback_goes_on_with_stricter_looks():
    """The option flips 4 of the 300 held-back samples (not confirmed at the first look); with op1 in float it still
    flips them (not confirmed at the second look); with op1 and op2 in float it flips none and is confirmed at the
    third look's stricter confidence (0 of 300: up to 1.62 points at 0.9 split over three looks). Before, the first
    choice not confirmed ended the search with no result."""
    from edgeopt.converters.quantize.strategy import run_search
    from edgeopt.metrics.confidence import look_confidence

    search, confirm, fp32, lucky = _parts(0, 4)
    ops = ("op1", "op2", "op3")

    def with_float(_, kept):
        run = fp32 if {"op1", "op2"} <= set(kept) else lucky
        return lambda: (("float", tuple(kept)), run)

    result = run_search(options=[("lucky", lambda: (("float", ()), lucky))],
                        rank=lambda art, deadline: [(op, 1.0 - i / 10) for i, op in enumerate(ops)],
                        with_float=with_float, fp32_run=fp32, search=search, confirm=confirm, bound=2.0,
                        budget_s=3600, confidence=0.9, quantizes=lambda art: len(art[1]) < len(ops))
    assert result.best is not None and result.best.kept == ("op1", "op2")
    assert result.report["confirm_looks"] == 3 and result.best.confirm_level == pytest.approx(look_confidence(0.9, 3))
    looked = [(t["what"], t["met"]) for t in result.report["tried"] if "met" in t]
    assert looked == [("lucky", False), ("lucky + 1 most sensitive op(s) in float", False),
                      ("lucky + 2 most sensitive op(s) in float", True)]
    assert result.report["confirm_drop_upper"] < 2.0


def test_the_search_stops_when_no_further_look_could_confirm_anything():
    """Every choice flips the same 4 held-back samples, however many ops are in float. Each look is stricter: at 0.9
    over 300 held-back samples, a candidate that changes none would still pass a third look (up to 1.99 points) but
    not a fourth (2.32), so the search stops after three looks, says why, and the failure asks for more --eval."""
    from edgeopt.converters.quantize.strategy import run_search
    from edgeopt.converters.quantize.verdict import gate_failure

    search, confirm, fp32, lucky = _parts(0, 4)
    ops = tuple(f"op{i}" for i in range(64))
    result = run_search(options=[("lucky", lambda: (("q", ()), lucky))],
                        rank=lambda art, deadline: [(op, 1.0) for op in ops],
                        with_float=lambda _, kept: (lambda: (("q", tuple(kept)), lucky)), fp32_run=fp32,
                        search=search, confirm=confirm, bound=2.0, budget_s=3600, confidence=0.9,
                        quantizes=lambda art: len(art[1]) < len(ops))
    assert result.best is None and result.report["confirm_looks"] == 3
    assert result.report["looks_spent"].startswith("a 4th look at the 300 held-back samples, at 0.996 confidence")
    assert sum("met" in t for t in result.report["tried"]) == 3  # the choices looked at, no more
    err = gate_failure("qdq", result, 2.0)
    assert "the search stopped: a 4th look" in err.message and "give more --eval samples" in err.hint


def test_the_looks_at_the_held_back_part_are_counted_over_every_search_of_a_run(tmp_path):
    """The mode search, the search after it and every backend tried look at the same held-back part: one count per
    run (``ChainContext.held_back_looks``, what ``bound.prepare`` hands every search), so a search after one that
    looked once judges its first look at the second look's confidence: one flip of 300 held back, confirmed on a
    first look (up to 1.49 points, above), is up to 2.14 points there and refused."""
    from fixtures_models import outlier_mlp

    from edgeopt.converters.accuracy_bound import AccuracyBound
    from edgeopt.converters.base import ChainContext
    from edgeopt.converters.quantize.bound import prepare
    from edgeopt.converters.quantize.strategy import run_search
    from edgeopt.metrics.confidence import Looks, look_confidence

    search, confirm, fp32, lucky = _parts(0, 4)
    looks = Looks()
    first = run_search(options=[("lucky", lambda: ("lucky", lucky))], rank=None, with_float=None, fp32_run=fp32,
                       search=search, confirm=confirm, bound=2.0, budget_s=3600, confidence=0.9, looks=looks)
    assert first.best is None and looks.count == 1
    search, confirm, fp32, one = _parts(0, 1)
    second = run_search(options=[("one", lambda: ("one", one))], rank=None, with_float=None, fp32_run=fp32,
                        search=search, confirm=confirm, bound=2.0, budget_s=3600, confidence=0.9, looks=looks)
    assert looks.count == 2 and second.report["confirm_looks"] == 2 and second.best is None
    assert second.closest.confirm_level == pytest.approx(look_confidence(0.9, 2))
    assert second.report["confirm_drop_upper"] == pytest.approx(2.144, abs=1e-3)
    assert "up to 2.14 at 0.985 confidence" in second.report["not_confirmed"]

    model = tmp_path / "m.onnx"
    outlier_mlp(model, 0)
    ds, _ = _data(40)
    ctx = ChainContext(work_dir=tmp_path, artifact_dir=tmp_path, reference_model=model, eval=ds)
    b = prepare(ctx, "qdq", model, AccuracyBound(max_accuracy_drop=2.0))
    assert b.looks is ctx.held_back_looks and isinstance(b.looks, Looks)


def test_the_mode_search_refuses_the_lucky_candidate_the_same_way():
    """``choose_mode`` (ONNX Runtime's and OpenVINO's modes) confirms its choice through the same judge, and says
    why."""
    from types import SimpleNamespace

    from edgeopt.converters.quantize.bound import Bounded, ModeCandidate, choose_mode

    search, confirm, fp32, lucky = _parts(0, 4)
    q = SimpleNamespace(quantized_units=1, float_units=0, notes={})
    b = Bounded(search, confirm, fp32, 1, confidence=0.9)
    choice = choose_mode([ModeCandidate("dynamic per-channel", lambda: ("a", lucky, q))], b=b, bound=2.0,
                         budget_s=3600, fp32_timed=fp32, backend="onnxruntime")
    [row] = choice.report["candidates"]
    assert choice.label is None and row["verdict"] == "dropped"
    assert row["why"] == ("chosen on the search part, not confirmed on the held-back part: drop 1.33 points on the "
                          "held-back part, up to 2.92 at 0.939 confidence (bound 2)")


@pytest.mark.parametrize("kind, unit, samples, points", [
    ("top1", "%", 100, 1.0), ("ctc", "%", 50, 2.0), ("position_agreement", "%", 100, None),
    ("cosine", "%", 10, None), ("top1", "dB", 100, None)])
def test_one_sample_is_worth_100_over_n_points_for_a_counted_metric_only(kind, unit, samples, points):
    from edgeopt.validation_model import sample_points

    assert sample_points(kind, unit, samples) == points


@pytest.mark.parametrize("drop, points, within", [
    (1.0, 1.0, True), (1.01, 1.0, False), (2.0, None, True), (1.6064, 100 / 249, False),  # silero VAD on the Jetsons
    (0.0, 100 / 33, True), (100 / 33, 100 / 33, False)])  # one sample worth more than the bound: only no drop holds
def test_within_bound_without_a_confidence_limit_keeps_one_sample_of_room(drop, points, within):
    """The point rule, for a user's metric without per-sample scores (and validations stored before the limit)."""
    from edgeopt.validation_model import within_bound

    assert within_bound(drop, 2.0, points) is within


@pytest.mark.parametrize("drop, upper, within", [(1.0, 2.36, False), (1.0, 2.0, True), (-0.4, -0.07, True)])
def test_within_bound_judges_the_upper_confidence_limit_when_there_is_one(drop, upper, within):
    from edgeopt.validation_model import within_bound

    assert within_bound(drop, 2.0, 100 / 300, upper=upper) is within


def test_a_held_back_part_that_can_confirm_only_a_lossless_candidate_is_said():
    from edgeopt.metrics.confidence import look_confidence
    from edgeopt.validation_model import small_eval_warning

    first = look_confidence(0.9, 1)
    msg = small_eval_warning("top1_accuracy", 100 / 150, 150, 2.0, first)
    assert "on the 150 held-back eval samples an INT8 model that loses one sample and gains none can't" in msg
    assert small_eval_warning("top1_accuracy", 100 / 300, 300, 2.0, first) is None
    assert small_eval_warning("cosine_vs_fp32", None, 10, 2.0, first) is None


def test_the_metric_kind_is_chosen_once_for_both_parts():
    """A CTC-like output whose blank share is 75 % on the searched samples and 12.5 % on the held-back ones: chosen
    on each part alone, the search was judged by CTC exact match and the held-back part by per-position
    agreement. Chosen once (on the eval as given), all three metrics are one kind."""
    from edgeopt.converters.quantize.eval_parts import part_metrics
    from edgeopt.metrics import make_metric

    rng = np.random.default_rng(1)
    t, classes = 8, 40  # an alphabet: a handful of classes is never taken for CTC

    def part(blanks: int, n: int) -> Dataset:
        logits = rng.standard_normal((n, 1, t, classes)).astype(np.float32)
        logits[:, :, :blanks, 0] += 10.0  # the blank wins at `blanks` of the t positions
        return Dataset({"x": logits}, ranks={"x": 3})

    search, confirm = part(6, 20), part(1, 20)

    def fp32(feed):
        return {"y": feed["x"]}

    assert make_metric(fp32, search).kind != make_metric(fp32, confirm).kind  # the flaw: two kinds
    kinds = {m.kind for m in part_metrics(fp32, search, confirm)[:3]}
    assert len(kinds) == 1


@pytest.mark.onnxruntime
@pytest.mark.parametrize("flipped, passed", [(7, True), (8, False)])
def test_the_convert_gate_judges_the_upper_confidence_limit(tmp_path, flipped, passed):
    """``validate_artifact``'s max_accuracy_drop gate judges by the searches' rule: 8 of 600 samples flipped is a
    1.33-point drop, within a 2-point bound as a point (and with one sample of room), but up to 2.16 points at 0.9
    confidence, so the gate misses; 7 flipped are up to 1.95."""
    from edgeopt.errors import GateFailedError
    from edgeopt.validate import check_gates, validate_artifact

    ds, w = _data()
    ref_y = ds.arrays["x"][:, 0] @ w
    marked = [i for i in range(N) if np.argmax(ref_y[i]) != 0][:flipped]
    ds.arrays["x"][marked, 0, -1] = 1.0
    w_art = w.copy()
    w_art[-1, 0] = 1e3  # the marker makes class 0 win: the marked samples' top-1 flips

    art, manifest = _reference_and_artifact(tmp_path, w, w_art)
    v = validate_artifact(art, tmp_path / "ref.onnx", ds, data_source="eval", manifest=manifest, max_accuracy_drop=2.0,
                          confidence=0.9)
    assert v.metric_drop == pytest.approx(100 * flipped / N, abs=1e-3) and v.confidence == 0.9
    assert v.gates["max_accuracy_drop"].passed is passed
    if not passed:
        with pytest.raises(GateFailedError, match=r"drop 1.33 pts on 600 samples, up to 2.16 pts at 0.9 confidence"):
            check_gates(v)


def _reference_and_artifact(tmp_path, w, w_art):
    """ref.onnx (x @ w) and an ONNX Runtime artifact of x @ w_art: the artifact's directory and manifest."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    def save(weights, path):
        g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, C])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, C])],
                              [numpy_helper.from_array(weights, "w")])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(path))

    save(w, tmp_path / "ref.onnx")
    art = tmp_path / "art"
    art.mkdir()
    save(w_art, art / "model.onnx")
    manifest = {"precision": "fp32", "inputs": [{"name": "x"}], "outputs": [{"name": "y"}],
                "runtime": {"backend": "onnxruntime", "model": "model.onnx", "settings": {}}}
    return art, manifest


@pytest.mark.onnxruntime
def test_the_convert_gate_and_the_pipeline_gate_judge_a_metric_that_does_not_count_samples_by_a_bootstrap(
        tmp_path):
    """Cosine to FP32 on 100 samples, 6 of them far off: the drop on all of them is within a bound that its
    bootstrap upper limit (seeded: the same figure every time) is not. The convert gate refuses it as the INT8
    search would, saying so; so does the pipeline's gate; a bound over the upper limit holds."""
    from edgeopt.errors import GateFailedError
    from edgeopt.metrics import MetricName, MetricSpec
    from edgeopt.pipeline.gates import check
    from edgeopt.pipeline.recipe import Gates
    from edgeopt.validate import check_gates, validate_artifact

    ds, w = _data(100)
    _mark(ds, 6)
    w_art = w.copy()
    w_art[-1] = 3.0  # the marked samples' outputs turn towards (1, 1, ...)
    art, manifest = _reference_and_artifact(tmp_path, w, w_art)

    def validate(bound):
        return validate_artifact(art, tmp_path / "ref.onnx", ds, data_source="eval", manifest=manifest,
                                 max_accuracy_drop=bound, metric=MetricSpec(name=MetricName.COSINE), confidence=0.9)

    seen = validate(100.0)
    assert seen.sample_points is None and seen.halves_drop_p90 is None and seen.drop_upper > seen.metric_drop + 0.2
    between = validate((seen.metric_drop + seen.drop_upper) / 2)
    assert between.drop_upper == seen.drop_upper and not between.gates["max_accuracy_drop"].passed
    with pytest.raises(GateFailedError, match=r"at 0.9 confidence >"):
        check_gates(between)
    [gate] = check(Gates(max_accuracy_drop=between.gates["max_accuracy_drop"].threshold), validation=between,
                   bench=None, est=None, artifact_bytes=1)
    assert gate.passed is False
    assert validate(seen.drop_upper + 0.01).gates["max_accuracy_drop"].passed


def test_the_too_small_refusal_names_the_runs_look_it_was_judged_at():
    """151 held-back samples confirm a 2-point bound on a first look (0 changed: up to 1.24 points) but not on a
    run's second (2.14 points at 0.962, after an earlier search or backend looked once): the refusal says which."""
    from edgeopt.metrics.confidence import look_confidence
    from edgeopt.validation_model import eval_too_small

    assert eval_too_small("decision", 151, 2.0, look_confidence(0.75, 1), 0.75, 0.5) is None
    err = eval_too_small("decision", 151, 2.0, look_confidence(0.75, 2), 0.75, 0.5, look=2)
    assert "on this run's 2nd look at them" in err.message and "looked once" in err.message
    assert "up to 2.14 points worse" in err.message and err.details["look"] == 2
