"""The accuracy-aware INT8 search (converters/quantize/strategy.py and its modules): it finishes within its budget, ranks
the ops once, recovers a per-position (sequence) model whose naive INT8 breaks, and says whether the
result is faster than FP32.

Models are built here (ONNX graphs with fixed weights): a per-position sequence tagger ``[1,T,16] ->
[1,T,10]`` whose hidden layer has two channels ~3000x larger than the rest, so per-tensor INT8 of that
layer wipes out the channels the tagger depends on (the flaw real recognisers show). Labels are by
construction (cluster ids per position).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fixtures_models import outlier_mlp

from edgeopt.converters.accuracy_bound import AccuracyBound
from edgeopt.converters.base import ChainContext, Intermediate, StageRecord
from edgeopt.data import Dataset
from edgeopt.enums import Precision, QuantMode
from edgeopt.errors import GateFailedError

pytestmark = pytest.mark.onnxruntime

T = 8  # positions per sequence


def sequence_tagger(path: Path, seed: int = 0) -> np.ndarray:
    """x[1,T,16] -> MatMul/Relu x3 -> MatMul -> logits[1,T,10]: the outlier MLP at every position (as a
    recogniser's head is), tagging each position with its cluster. Returns the cluster prototypes."""
    return outlier_mlp(path, seed, positions=T)


def sequences(protos, n: int, seed: int) -> tuple[Dataset, np.ndarray]:
    """``n`` sequences of T positions; the per-position cluster ids are returned beside the dataset
    (the dataset itself carries no labels: the search then measures agreement with FP32)."""
    rng = np.random.default_rng(seed)
    c = rng.integers(0, 10, (n, T))
    x = (protos[c] + 0.3 * rng.standard_normal((n, T, 16))).astype(np.float32)
    return Dataset({"x": x}, None, source="clustered sequences (labels by construction)", synthetic=True,
                   ranks={"x": 3}), c


def per_position_agreement(path_or_run, reference_run, ds: Dataset) -> float:
    """% of positions whose argmax along the class axis matches FP32's (the test's own check)."""
    from edgeopt.runtime.run_fn import run_fn

    run = run_fn(path_or_run, threads=2) if isinstance(path_or_run, (str, Path)) else path_or_run
    same = []
    for f in ds.feeds():
        a = np.argmax(next(iter(run(f).values())), axis=-1)
        b = np.argmax(next(iter(reference_run(f).values())), axis=-1)
        same.append(np.mean(a == b))
    return 100.0 * float(np.mean(same))


def _ctx(tmp_path, calib, ev, stage="qdq"):
    (tmp_path / "art").mkdir(exist_ok=True)
    return ChainContext(work_dir=tmp_path, artifact_dir=tmp_path / "art", reference_model=tmp_path,
                        calib=calib, eval=ev, check_samples=ev.subset(np.arange(8)), threads=2,
                        record=StageRecord(stage, {}))


@pytest.fixture
def tagger(tmp_path):
    model = tmp_path / "tagger.onnx"
    protos = sequence_tagger(model)
    calib, _ = sequences(protos, 48, seed=1)
    ev, _ = sequences(protos, 120, seed=2)
    return model, calib, ev


def test_sequence_model_naive_int8_breaks_and_search_recovers_it_ranking_once(tagger, tmp_path, monkeypatch):
    from edgeopt.converters.quantize import QdqConfig, QdqStage, sensitivity
    from edgeopt.runtime.run_fn import run_fn

    model, calib, ev = tagger
    fp32 = run_fn(model, threads=2)
    (tmp_path / "naive").mkdir()
    naive = QdqStage().run(Intermediate(model), QdqConfig(mode="static"), _ctx(tmp_path / "naive", calib, ev))
    assert per_position_agreement(naive.path, fp32, ev) < 90.0  # naive INT8 really breaks the tagger

    calls = {"rank": 0, "isolate": 0}
    rank, isolate = sensitivity.rank_nodes, sensitivity.isolate

    def counting_rank(*a, **k):
        calls["rank"] += 1
        return rank(*a, **k)

    def counting_isolate(*a, **k):
        calls["isolate"] += 1
        return isolate(*a, **k)

    monkeypatch.setattr(sensitivity, "rank_nodes", counting_rank)
    monkeypatch.setattr(sensitivity, "isolate", counting_isolate)
    ctx = _ctx(tmp_path, calib, ev)
    # static pinned: this is the static search's test (with auto, dynamic with ops in float holds first)
    out = QdqStage().run(Intermediate(model), QdqConfig(mode="static", bound=AccuracyBound(max_accuracy_drop=1.0, search_budget=3600)), ctx)
    aa = ctx.record.report["accuracy_aware"]
    assert aa["met"] and aa["confirm_drop_points"] <= 1.0 and aa["search_drop_points"] <= 1.0
    # ranked once: one ranking, one isolated model per quantized node, whatever the number of candidates
    assert calls["rank"] == 1 and aa["sensitivity"]["rank_calls"] == 1
    assert calls["isolate"] == aa["sensitivity"]["nodes"] == aa["quantized_ops_ranked"]
    fallback = [t for t in aa["tried"] if "in float" in t["what"]]
    assert fallback and len(fallback) <= 1 + int(np.ceil(np.log2(aa["quantized_ops_ranked"]))) * 2
    assert 1 <= aa["kept_in_float_count"] < aa["quantized_ops_ranked"]  # not the whole net in float
    assert aa["search_seconds"] <= aa["budget_s"]
    assert per_position_agreement(out.path, fp32, ev) >= 98.0  # the test's own per-position check, all data
    assert set(aa["speed"]["latency_ms"]) >= {"fp32", "int8_final"} and "estimate" in aa["speed"]["note"]
    json.dumps(ctx.record.report)


def test_tiny_budget_is_a_gate_failure_naming_the_best_metric(tagger, tmp_path):
    from edgeopt.converters.quantize import QdqConfig, QdqStage

    model, calib, ev = tagger
    ctx = _ctx(tmp_path, calib, ev)
    with pytest.raises(GateFailedError) as err:
        QdqStage().run(Intermediate(model), QdqConfig(bound=AccuracyBound(max_accuracy_drop=1.0, search_budget=0.01)), ctx)
    line = err.value.one_line()
    assert "search budget" in line and "best " in line and "ops kept in float" in line
    aa = ctx.record.report["accuracy_aware"]
    assert aa["stopped_by_budget"] and aa["candidates"] == 1 and not aa["met"]


def test_convert_cli_tiny_budget_exits_5_and_writes_nothing(tagger, tmp_path, cli):
    model, calib, ev = tagger
    np.savez(tmp_path / "calib.npz", x=calib.arrays["x"])
    np.savez(tmp_path / "eval.npz", x=ev.arrays["x"])
    (tmp_path / "recipe.yaml").write_text("search_budget: 0.01\n")
    out = tmp_path / "out"
    proc = cli("convert", str(model), "--backend", "onnxruntime", "--precision", "int8", "--calib",
               str(tmp_path / "calib.npz"), "--eval", str(tmp_path / "eval.npz"), "--max-accuracy-drop", "1",
               "--recipe", str(tmp_path / "recipe.yaml"), "-o", str(out), "--json")
    assert proc.returncode == 5, proc.stderr[-2000:]
    err = json.loads(proc.stdout)
    assert err["ok"] is False and "search budget" in err["error"]["message"]
    assert not out.exists() and not list(tmp_path.glob("out.tmp-*"))


def test_search_budget_flag_reaches_the_plan(tmp_path, cli):
    model = tmp_path / "tagger.onnx"
    sequence_tagger(model)
    proc = cli("convert", str(model), "--backend", "onnxruntime", "--precision", "int8", "--max-accuracy-drop", "1",
               "--search-budget", "30", "--min-speedup", "1.2", "--dry-run", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    plan = json.loads(proc.stdout)["plan"]
    quant = next(s for s in plan["stages"] if s["name"] == "qdq")["config"]
    assert quant["bound"]["search_budget"] == 30 and quant["bound"]["min_speedup"] == 1.2
    bad = cli("convert", str(model), "--search-budget", "0", "--dry-run", "--json")
    assert bad.returncode == 2


def test_min_speedup_gate_fails_when_int8_is_no_faster(tagger, tmp_path):
    """A tiny MLP is overhead-bound: its INT8 is not 100x faster than FP32, so --min-speedup 100 fails (exit 5)
    with the quick timing in the details; without the gate the run only warns when it is no faster."""
    from edgeopt.converters.quantize import QdqConfig, QdqStage

    model, calib, ev = tagger
    ctx = _ctx(tmp_path, calib, ev)
    with pytest.raises(GateFailedError, match=r"below --min-speedup 100") as err:
        QdqStage().run(Intermediate(model), QdqConfig(mode="static", bound=AccuracyBound(max_accuracy_drop=1.0, min_speedup=100.0)), ctx)
    assert {"fp32", "int8_final"} <= set(err.value.details["latency_ms"])


@pytest.mark.openvino
@pytest.mark.parametrize("ranking", ["bypass", "local"])
def test_openvino_search_recovers_sequence_model_ranking_once(tagger, tmp_path, monkeypatch, ranking):
    """Both rankings (bypass each quantizer: one compile each; local error: one compile for all, used past
    BYPASS_LIMIT quantizers) find the outlier layer's quantizer and the search keeps only it in float."""
    from edgeopt.converters.backends.openvino import search as nncf_search
    from edgeopt.converters.backends.openvino.stage import OpenVINOBackend, OpenVINOConfig
    from edgeopt.runtime.run_fn import run_fn

    if ranking == "local":
        monkeypatch.setattr(nncf_search, "BYPASS_LIMIT", 0)
    model, calib, ev = tagger
    calls = {"rank": 0}
    listing = nncf_search.activation_quantizers

    def counting(q):
        calls["rank"] += 1
        return listing(q)

    monkeypatch.setattr(nncf_search, "activation_quantizers", counting)
    ctx = _ctx(tmp_path, calib, ev, stage="openvino")
    out = OpenVINOBackend().run(Intermediate(model), OpenVINOConfig(precision=Precision.INT8, mode=QuantMode.STATIC,  # auto: weight-only first
                                                                    bound=AccuracyBound(max_accuracy_drop=1.0, search_budget=3600)), ctx)
    aa = ctx.record.report["accuracy_aware"]
    assert aa["met"] and aa["confirm_drop_points"] <= 1.0
    assert calls["rank"] == 1 and aa["sensitivity"]["rank_calls"] == 1
    assert aa["tried"][0]["what"] == "nncf defaults" and aa["kept_in_float_count"] >= 1
    assert aa["kept_in_float"] and all(k["ops"] for k in aa["kept_in_float"])
    assert aa["kept_in_float"][0]["quantizer"].startswith("reluB")  # fcB's outlier channels, read by fcC
    assert aa["kept_in_float"][0]["float_weights"]  # its reader's INT8 weights went back to FP32 too
    assert ("only that unit float" if ranking == "bypass" else "own error") in aa["sensitivity"]["method"]
    from edgeopt.runtime.runners.openvino import Runner

    runner = Runner(str(tmp_path / "art"), {"runtime": out.notes["runtime"], "inputs": [], "outputs": []}, threads=2)
    assert per_position_agreement(lambda f: runner.run(f), run_fn(model, threads=2), ev) >= 98.0


@pytest.mark.openvino
def test_openvino_search_puts_int8_weights_back_in_float_and_rebuilds_with_ignored_scope(tmp_path):
    """A model that INT8 *weights* break (fcB's per-channel scale is set by a weight on a dead input): removing
    activation quantizers cannot recover it; the search's unit (reluA's quantizer and its reader fcB) puts fcB's
    FP32 weights back, and the hit is rebuilt by nncf.quantize with fcB in ignored_scope."""
    from fixtures_models import weight_outlier_mlp

    from edgeopt.converters.backends.openvino.stage import OpenVINOBackend, OpenVINOConfig
    from edgeopt.runtime.run_fn import run_fn
    from edgeopt.runtime.runners.openvino import Runner

    model = tmp_path / "weights.onnx"
    protos = weight_outlier_mlp(model)
    calib, _ = sequences(protos, 48, seed=1)
    ev, _ = sequences(protos, 96, seed=2)
    ctx = _ctx(tmp_path, calib, ev, stage="openvino")
    out = OpenVINOBackend().run(Intermediate(model), OpenVINOConfig(precision=Precision.INT8, bound=AccuracyBound(max_accuracy_drop=1.0, search_budget=3600)), ctx)
    aa = ctx.record.report["accuracy_aware"]
    assert aa["tried"][0]["search_drop_points"] > 20  # naive INT8 is broken
    assert aa["met"] and aa["confirm_drop_points"] <= 1.0
    assert any("fcB" in k["float_weights"] for k in aa["kept_in_float"])
    assert aa["final_build"]["what"] == "nncf.quantize with those ops in ignored_scope"
    runner = Runner(str(tmp_path / "art"), {"runtime": out.notes["runtime"], "inputs": [], "outputs": []}, threads=2)
    assert per_position_agreement(lambda f: runner.run(f), run_fn(model, threads=2), ev) >= 98.0


@pytest.mark.slow
@pytest.mark.tflite
def test_tflite_int8_with_bound_is_searched_confirmed_and_timed(tmp_path):
    """The float .tflite quantized by ai-edge-quantizer: its static INT8 first, confirmed on the held-back half,
    and timed against the float .tflite it was made from."""
    from fixtures_models import digits_datasets

    from edgeopt.converters.backends.tflite.stage import TFLiteBackend, TFLiteConfig

    digits = Path(__file__).resolve().parents[2] / "fixtures" / "models" / "digits_cnn.onnx"
    calib, test = digits_datasets()
    ctx = _ctx(tmp_path, calib, test, stage="tflite")
    TFLiteBackend().run(Intermediate(digits), TFLiteConfig(precision=Precision.INT8, bound=AccuracyBound(max_accuracy_drop=2.0),
                                                           calib_samples=64), ctx)
    aa = ctx.record.report["accuracy_aware"]
    assert aa["met"] and aa["confirm_drop_points"] <= 2.0 and aa["labels"]
    assert aa["tried"][0]["what"] == "ai-edge-quantizer static per-channel"
    assert (tmp_path / "art" / "model.tflite").is_file()
    speed = aa["speed"]
    assert {"fp32", "int8_final"} <= set(speed["latency_ms"])


def _linear_model_search_data(n: int = 480):
    """A seeded rng, a 4x5 linear "model", its search and held-back halves and its FP32 run function. 480 samples:
    a held-back half of 240 can confirm a top-1 drop within 1 point at the default confidence."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    ds = Dataset({"x": rng.standard_normal((n, 1, 4)).astype(np.float32)}, ranks={"x": 2})
    search, confirm = ds.split(0.5, seed=0)
    return rng, w, search, confirm, lambda feed: {"y": feed["x"] @ w}


def test_a_hit_with_every_op_in_float_is_fp32_not_an_int8_result():
    """Only keeping all ranked ops in float meets the bound: that candidate bounds the bisection, but the search
    ends without a result and the gate failure says that only the FP32 model met it."""
    from edgeopt.converters.quantize.strategy import run_search
    from edgeopt.converters.quantize.verdict import gate_failure

    rng, w, search, confirm, fp32_run = _linear_model_search_data()

    def broken(feed):
        return {"y": -(feed["x"] @ w)}

    ops = ["a", "b", "c"]

    def with_float(i, kept):
        return lambda: (None, fp32_run if len(kept) == len(ops) else broken)

    result = run_search(options=[("preset", lambda: (None, broken))], rank=lambda art, dl: [(o, 1.0) for o in ops],
                        with_float=with_float, fp32_run=fp32_run, search=search, confirm=confirm, bound=1.0,
                        budget_s=3600)
    assert result.best is None and result.report["only_all_float_meets"]
    assert any(t["kept_in_float"] == 3 and t["search_drop_points"] == 0 and t["selected"]
               for t in result.report["tried"])  # selected on the search part, never the search's choice
    msg = gate_failure("qdq", result, 1.0).one_line()
    assert "only with every op in float (the FP32 model)" in msg and "of 3 ops kept in float" in msg


@pytest.mark.parametrize("meets_from, quantized_below, best_kept", [(4, 4, None), (3, 4, 3)],
                         ids=["only-fp32-meets", "bisects-below-the-fp32-hit"])
def test_a_hit_with_no_quantized_compute_op_left_is_fp32_too(meets_from, quantized_below, best_kept):
    """The ranking holds ops without weights too (a Sub, a Squeeze), so fewer than all ranked ops in float can leave
    no compute op quantized (magika's search wrote such a model as "int8"). With ``quantizes``, that candidate is the
    FP32 model: it bounds the bisection, which looks below it for a hit that still quantizes, else the search fails
    saying only the FP32 model met the bound."""
    from edgeopt.converters.quantize.strategy import run_search

    _, w, search, confirm, fp32_run = _linear_model_search_data()

    def broken(feed):
        return {"y": -(feed["x"] @ w)}

    ops = ["a", "b", "c", "d", "e"]

    def with_float(i, kept):
        return lambda: (len(kept), fp32_run if len(kept) >= meets_from else broken)

    result = run_search(options=[("preset", lambda: (0, broken))], rank=lambda art, dl: [(o, 1.0) for o in ops],
                        with_float=with_float, fp32_run=fp32_run, search=search, confirm=confirm, bound=2.0,
                        budget_s=3600, quantizes=lambda k: k < quantized_below)  # 2: the hit is the held-back's 2nd look
    if best_kept is None:
        assert result.best is None and result.report["only_all_float_meets"]
        assert result.closest.kept != tuple(ops[:4])  # the FP32 candidate is never named the closest INT8
    else:
        assert result.best is not None and len(result.best.kept) == best_kept
    assert any(t["kept_in_float"] == 4 and t.get("quantized_compute_ops") == 0 for t in result.report["tried"])


def test_float_fallback_goes_on_to_the_next_option_when_the_closest_one_has_no_hit():
    """The option closest to the bound can be the wrong base (magika on pi5: percentile calibration scored higher as
    built, but only min-max calibration holds once its Conv and Gemm are float): when the fallback on it ends without
    an INT8 hit and time is left, it runs on the next option, with the same ranking, and that option is the chosen."""
    from edgeopt.converters.quantize.strategy import run_search

    _, w, search, confirm, fp32_run = _linear_model_search_data()

    def half_broken(feed):
        y = feed["x"] @ w
        return {"y": y if float(feed["x"].sum()) > 0 else -y}

    def broken(feed):
        return {"y": -(feed["x"] @ w)}

    ops = ["a", "b", "c"]

    def with_float(i, kept):
        good = len(kept) == len(ops) if i == 0 else len(kept) >= 1
        return lambda: ((i, len(kept)), fp32_run if good else half_broken)

    ranks = []
    result = run_search(options=[("percentile", lambda: ((0, 0), half_broken)), ("min-max", lambda: ((1, 0), broken))],
                        rank=lambda art, dl: ranks.append(art) or [(o, 1.0) for o in ops], with_float=with_float,
                        fp32_run=fp32_run, search=search, confirm=confirm, bound=1.0, budget_s=3600, fallback_bases=2)
    assert result.best is not None and result.best.artifact == (1, 1) and len(ranks) == 1
    assert result.report["quantizer_options"] == {"chosen": "min-max", "float_fallback_also_on": ["min-max"]}
    assert "only_all_float_meets" not in result.report


def test_a_quantizer_crash_on_one_option_drops_that_option_not_the_search():
    """One option's build raises the quantizer's StageError (a library crash on a valid model): the search
    reports it under options_skipped and goes on to the next option, which meets the bound (#23)."""
    from edgeopt.converters.quantize.strategy import run_search
    from edgeopt.errors import StageError

    _, _, search, confirm, fp32_run = _linear_model_search_data()

    def crash():
        raise StageError("qdq: onnxruntime static INT8 failed: ValueError: The truth value of an array …")

    result = run_search(options=[("preset", crash), ("per-tensor", lambda: (None, fp32_run))], rank=None,
                        with_float=None, fp32_run=fp32_run, search=search, confirm=confirm, bound=1.0, budget_s=3600)
    assert result.best is not None and result.report["quantizer_options"]["chosen"] == "per-tensor"
    assert result.report["options_skipped"] == [{"what": "preset", "why": "failed: qdq: onnxruntime static INT8 "
                                                 "failed: ValueError: The truth value of an array …"}]


def test_a_float_fallback_candidate_the_quantizer_fails_to_build_is_a_miss_not_the_end_of_the_search():
    """ai-edge-quantizer 0.10.0 fails on some "k ops in float" recipes (its dequant_insert adds bytes to a str
    tensor name): that candidate is reported as not built and counted a miss, so the fallback tries more ops in
    float and finds the hit past it, where the failure used to end the backend's whole search."""
    from edgeopt.converters.quantize.strategy import run_search
    from edgeopt.errors import StageError

    _, w, search, confirm, fp32_run = _linear_model_search_data()

    def broken(feed):
        return {"y": -(feed["x"] @ w)}

    ops = ["a", "b", "c", "d", "e"]

    def with_float(i, kept):
        def build():
            if len(kept) == 2:
                raise StageError('tflite: ai-edge-quantizer failed (static): TypeError: can only concatenate str '
                                 '(not "bytes") to str')
            return len(kept), fp32_run if len(kept) >= 2 else broken
        return build

    result = run_search(options=[("preset", lambda: (0, broken))], rank=lambda art, dl: [(o, 1.0) for o in ops],
                        with_float=with_float, fp32_run=fp32_run, search=search, confirm=confirm, bound=2.0,
                        budget_s=3600)
    assert result.best is not None and len(result.best.kept) == 3  # 2 in float failed to build; 3 is the hit
    not_built = [t for t in result.report["tried"] if "not_built" in t]
    assert [t["kept_in_float"] for t in not_built] == [2] and "TypeError" in not_built[0]["not_built"]
    assert not not_built[0]["selected"]


def test_a_gate_failure_names_the_candidates_the_quantizer_could_not_build():
    """When no candidate holds and some failed to build (1 and 2 ops in float; 3 is the FP32 model), the exit-5
    message says how many, with the quantizer's reason."""
    from edgeopt.converters.quantize.strategy import run_search
    from edgeopt.converters.quantize.verdict import gate_failure
    from edgeopt.errors import StageError

    _, w, search, confirm, fp32_run = _linear_model_search_data()

    def broken(feed):
        return {"y": -(feed["x"] @ w)}

    ops = ["a", "b", "c"]

    def with_float(i, kept):
        def build():
            if len(kept) < len(ops):
                raise StageError("tflite: ai-edge-quantizer failed (weights per-channel): TypeError: …")
            return len(kept), fp32_run
        return build

    result = run_search(options=[("preset", lambda: (0, broken))], rank=lambda art, dl: [(o, 1.0) for o in ops],
                        with_float=with_float, fp32_run=fp32_run, search=search, confirm=confirm, bound=1.0,
                        budget_s=3600, quantizes=lambda k: k < len(ops))
    assert result.best is None
    msg = gate_failure("tflite", result, 1.0).one_line()
    assert "; 2 candidate(s) the quantizer could not build (tflite: ai-edge-quantizer failed" in msg


@pytest.mark.parametrize("mixed_scale, built_fbc, skipped_fbc, why", [
    (2.0, "preset mixed + fast_bias_correction=False", "fast_bias_correction=False", "scored below preset mixed"),
    (None, "fast_bias_correction=False", "preset mixed + fast_bias_correction=False", "scored no better than"),
], ids=["mixed-better", "tie-plain-wins"])
def test_full_bias_correction_runs_on_the_better_preset_only(mixed_scale, built_fbc, skipped_fbc, why):
    """NNCF's full bias correction costs about two quantizations: of its two options (on the plain preset and on
    `mixed`) only the one on the preset that scored better is built (on a tie, the plain one's); the other is
    reported as skipped, and the float fallback still builds on the right option index."""
    from edgeopt.converters.backends.openvino.search import bias_correction_on_the_better_preset
    from edgeopt.converters.quantize.strategy import run_search

    rng, w, search, confirm, fp32_run = _linear_model_search_data()
    labels = ["nncf defaults", "preset mixed (asymmetric activations)", "fast_bias_correction=False",
              "preset mixed + fast_bias_correction=False"]
    variants = [(lb, {}) for lb in labels]
    built, fallback_on = [], []
    # tie: the same noise for both presets (a model whose activations are all non-negative scores them alike)
    noise = {i: rng.standard_normal((64, 5)).astype(np.float32) for i in range(4)}
    if mixed_scale is None:
        noise[1] = noise[0]
    scales = {0: 5.0, 1: mixed_scale or 5.0, 2: 4.0, 3: 1.5}
    calls = dict.fromkeys(range(4), 0)

    def noisy(i):
        def run(feed):
            calls[i] += 1
            return {"y": feed["x"] @ w + scales[i] * noise[i][calls[i] % 64][None]}
        return run

    def option(i):
        def go():
            built.append(labels[i])
            calls[i] = 0
            return None, noisy(i)
        go.skip_when = bias_correction_on_the_better_preset(labels[i], variants)
        return go

    def with_float(i, kept):
        fallback_on.append(i)
        return lambda: (None, fp32_run)

    result = run_search(options=[(lb, option(i)) for i, lb in enumerate(labels)],
                        rank=lambda art, dl: [("a", 1.0), ("b", 0.5)], with_float=with_float, fp32_run=fp32_run,
                        search=search, confirm=confirm, bound=1.0, budget_s=600)
    assert built_fbc in built and skipped_fbc not in built
    assert result.report["options_skipped"][0]["what"] == skipped_fbc
    assert why in result.report["options_skipped"][0]["why"]
    best = labels.index(max(built, key=lambda lb: next(t["search_value"] for t in result.report["tried"]
                                                       if t["what"] == lb)))
    assert fallback_on and set(fallback_on) == {best}  # the best scored option's index, not its place in the list


@pytest.mark.openvino
def test_openvino_search_through_the_cli_keeps_nncf_logs_off_stderr(tagger, tmp_path, cli):
    """NNCF's own logger (set to INFO by its import, after the CLI quieted it) printed every ignored node of the
    search's ignored_scope rebuild on stderr: only --verbose shows library lines."""
    model, calib, ev = tagger
    np.savez(tmp_path / "calib.npz", x=calib.arrays["x"])
    np.savez(tmp_path / "eval.npz", x=ev.arrays["x"])
    proc = cli("convert", str(model), "--profile", "host", "--backend", "openvino", "--precision", "int8", "--calib",
               str(tmp_path / "calib.npz"), "--eval", str(tmp_path / "eval.npz"), "--max-accuracy-drop", "1",
               "--quant-mode", "static", "-o", str(tmp_path / "out"), "--json")  # auto would try weight-only first
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = next(s for s in json.loads((tmp_path / "out/manifest.json").read_text())["stages"]
                  if s["name"] == "openvino")["report"]["accuracy_aware"]
    assert report["kept_in_float_count"] >= 1  # the rebuild with ignored_scope ran
    assert "nncf" not in proc.stderr.lower() and json.loads(proc.stdout)["ok"] is True


def _failed_search(stopped_by_budget: bool):
    from edgeopt.converters.quantize.candidate import Candidate, SearchResult

    tried = [{"what": "plain", "kept_in_float": 0}, {"what": "+1 float", "kept_in_float": 1},
             {"what": "+2 float", "kept_in_float": 2}, {"what": "+4 float", "kept_in_float": 4}]
    report = {"metric": "top1", "metric_unit": "%", "candidates": 4, "budget_s": 120.0, "tried": tried,
              "stopped_by_budget": stopped_by_budget, "quantized_ops_ranked": 358,
              "fp32": {"search": 90.0, "confirm": 90.0}}
    return SearchResult(best=None, closest=Candidate("plain", (), search_value=80.0), report=report)


@pytest.mark.parametrize("stopped_by_budget", [False, True])
def test_a_gate_failure_says_what_was_tried_and_names_the_budget_only_when_it_stopped_the_search(stopped_by_budget):
    """'0 of 358 ops kept in float' was printed after candidates with 1, 2 and 4 float ops were tried,
    and 'raise --search-budget' was suggested when the budget was not what stopped the search."""
    from edgeopt.converters.quantize.verdict import gate_failure

    err = gate_failure("qdq", _failed_search(stopped_by_budget), 1.0)
    assert "0 of 358 ops kept in float; candidates with up to 4 ops in float were tried and scored lower" in err.message
    assert ("--search-budget" in err.hint) == stopped_by_budget


def _rotated(y: np.ndarray, cos: float) -> np.ndarray:
    """``y`` turned so that its cosine to ``y`` is ``cos`` (same norm)."""
    u = np.roll(y, 1) - (np.roll(y, 1) @ y.T) / (y @ y.T) * y  # a direction orthogonal to y
    return cos * y + np.sqrt(1 - cos**2) * np.linalg.norm(y) / np.linalg.norm(u) * u


def test_a_metric_that_does_not_count_samples_is_judged_by_a_bootstrap_of_its_drop():
    """Cosine to FP32 on 40 samples, four of them (two in each part) at cosine 0.8: the drop is 2 points on the
    search part, within a bound of 2.5, but the bootstrap's upper limit of that drop is over it: the eval data can't
    show the bound holds, so the candidate is not selected, and the reason says so. One sample in each part at
    cosine 0.95 is selected and confirmed. Neither kind of metric draws random halves any more."""
    from edgeopt.converters.quantize.budget import BudgetedSearch
    from edgeopt.metrics import MetricName, MetricSpec

    _, _, search, confirm, fp32_run = _linear_model_search_data(40)

    def candidate(bad: list[float], cos: float = 0.8):
        def run(feed):
            y = fp32_run(feed)["y"]
            return {"y": _rotated(y, cos) if float(feed["x"].sum()) in bad else y}
        return run

    def sums(part, k):
        return [float(part.feed(i)["x"].sum()) for i in range(k)]

    s = BudgetedSearch(fp32_run=fp32_run, search=search, confirm=confirm, bound=2.5, budget_s=3600,
                       metric_spec=MetricSpec(name=MetricName.COSINE), confidence=0.9)
    assert not s.halves and "bootstrap" in s.report["acceptance"]
    spread = s.judge(candidate(sums(search, 2) + sums(confirm, 2)))
    assert abs(s.drop(spread.search_value) - 2.0) < 1e-3 and spread.confirm_value is None
    assert spread.search_upper > 2.5 and not spread.met
    assert "points on the search part, up to" in s.why_missed(spread)
    fewer = s.judge(candidate(sums(search, 1) + sums(confirm, 1), 0.95))
    assert fewer.met and fewer.confirm_upper <= 2.5 and s.looks == 1
    counted = BudgetedSearch(fp32_run=fp32_run, search=search, confirm=confirm, bound=20.0, budget_s=3600,
                             metric_spec=MetricSpec(name=MetricName.TOP1))
    assert not counted.halves and "Tango" in counted.report["acceptance"]


def test_the_gate_and_the_search_judge_all_the_samples_alike():
    """The search judges over its two shuffled parts, the artifact's validation (the convert gate, optimize) over
    the eval data as given: the same upper limit (the bootstrap drawn on the data as given), so a choice the
    search confirmed is not refused by the gate for a different draw."""
    from edgeopt.converters.quantize.budget import BudgetedSearch
    from edgeopt.metrics import MetricName, MetricSpec, metric_for_outputs
    from edgeopt.metrics.confidence import drop_upper

    _, _, search, confirm, fp32_run = _linear_model_search_data(40)
    given = np.empty((len(search) + len(confirm), 1, 4), np.float32)  # the data as given, from the parts' positions
    given[search.positions], given[confirm.positions] = search.arrays["x"], confirm.arrays["x"]
    bad = {float(search.feed(i)["x"].sum()) for i in range(2)} | {float(confirm.feed(0)["x"].sum())}

    def run(feed):
        y = fp32_run(feed)["y"]
        return {"y": _rotated(y, 0.8) if float(feed["x"].sum()) in bad else y}

    s = BudgetedSearch(fp32_run=fp32_run, search=search, confirm=confirm, bound=5, budget_s=3600,
                       metric_spec=MetricSpec(name=MetricName.COSINE), confidence=0.9)
    chosen = s.judge(run)
    feeds = [{"x": given[i]} for i in range(len(given))]
    m = metric_for_outputs([fp32_run(f) for f in feeds], None, MetricSpec(name=MetricName.COSINE))
    gate = drop_upper(m, [m.digest(run(f)) for f in feeds], 0.9)  # what validate_artifact computes
    assert chosen.all_upper is not None and chosen.all_upper > 0 and gate == chosen.all_upper


def test_dynamic_with_ops_in_float_is_tried_when_only_static_held_and_every_dynamic_mode_missed():
    """ONNX Runtime has no static LSTM: where static held (its Linear INT8, x1.03 on resemblyzer's encoder) and
    every dynamic mode missed, dynamic with its most sensitive ops in float can be the faster one that holds."""
    from types import SimpleNamespace

    from edgeopt.converters.quantize.qdq_modes import _static_held_where_dynamic_missed

    def choice(label, rows):
        return SimpleNamespace(label=label, report={"candidates": [dict(zip(("mode", "verdict", "within_bound"), r,
                                                                           strict=False)) for r in rows]})

    over = ("dynamic per-channel", "dropped", False)
    assert _static_held_where_dynamic_missed(choice("static per-channel", [over, ("static per-channel", "chosen", True)]))
    held = ("dynamic per-tensor", "dropped", True)  # held, and slower
    assert not _static_held_where_dynamic_missed(choice("static per-channel", [over, held]))
    failed = ("dynamic per-channel", "dropped")  # failed to build: never judged
    assert not _static_held_where_dynamic_missed(choice("static per-channel", [failed]))
    assert not _static_held_where_dynamic_missed(choice("dynamic per-tensor", [over]))


@pytest.mark.parametrize("bf16_ms, holds, named", [(0.17, True, True), (0.17, False, False), (0.33, True, False)])
def test_int8_faster_than_fp32_still_names_a_float_precision_that_holds_and_is_much_faster(bf16_ms, holds, named):
    """g2p-en's GRU on an AMX CPU: OpenVINO's INT8 a little faster than its FP32, bf16 twice as fast and within
    the bound. --precision int8 keeps 8 bits, and says which float was faster (only one that holds, 1.2x)."""
    from edgeopt.converters.quantize.speed_verdict import speed_verdict

    said: list[str] = []
    ctx = type("Ctx", (), {"warn": staticmethod(said.append)})()
    alternatives = {"bf16": {"latency_ms": bf16_ms, "holds": holds, "drop": "drop 0.00 points on the held-out part",
                             "suggest": "--precision bf16"}}
    entry = speed_verdict({"fp32": 0.39, "int8_final": 0.36}, final_key="int8_final", runtime="openvino",
                          min_speedup=None, ctx=ctx, prefix="openvino", alternatives=alternatives)
    assert entry["speedup_vs_fp32"] == pytest.approx(1.083)
    assert ("faster_float" in entry) is named
    assert bool(said) is named
    if named:
        assert "bf16 holds the bound and is x2.1 faster" in said[0] and "--precision bf16" in said[0]


def test_a_native_float_is_judged_and_timed_beside_the_modes_never_chosen_by_them():
    """choose_mode's ``floats`` (OpenVINO's bf16 where the CPU has it): judged by the search's rules, timed in the
    same blocks, reported with whether it holds, and handed to the speed verdict; the choice stays an INT8 mode."""
    from edgeopt.converters.quantize.bound import Bounded, ModeCandidate, choose_mode
    from edgeopt.converters.quantize.modes import DynamicMode, QuantizedModel

    _, w, search, confirm, fp32_run = _linear_model_search_data()
    b = Bounded(search, confirm, fp32_run, 1)

    def off(feed):  # a float precision that costs the bound: every score negated
        return {"y": -(feed["x"] @ w)}

    mode = ModeCandidate("dynamic per-channel", lambda: ("int8.onnx", fp32_run, QuantizedModel(None, DynamicMode(), 1, 0)))
    choice = choose_mode([mode], b=b, bound=1.0, budget_s=3600, fp32_timed=fp32_run, backend="openvino",
                         floats={"bf16": (fp32_run, "--precision bf16"), "fp16": (off, "--precision fp16")})
    assert choice.label == "dynamic per-channel" and set(choice.latency) == {"fp32", "dynamic per-channel"}
    assert choice.floats["bf16"]["holds"] is True and choice.floats["bf16"]["latency_ms"] > 0
    assert choice.floats["bf16"]["drop"].startswith("drop 0.00 points on all 480 eval samples")
    assert choice.floats["fp16"]["holds"] is False and "on the search part" in choice.floats["fp16"]["drop"]
    assert choice.report["floats"] == choice.floats


def _counting_metric(tmp_path):
    """A user metric (MODULE:FUNCTION in ``tmp_path``) without per-sample scores: the mean of the first output."""
    (tmp_path / "mean_metric.py").write_text(
        "import numpy as np\n"
        "def score(outputs, labels):\n"
        "    return float(np.mean([o['y'].mean() for o in outputs]))\n")
    return "mean_metric:score"


def test_a_user_metric_scores_the_halves_only_for_a_choice_to_confirm(tmp_path):
    """The halves rule's 20 FP32 halves are scored at the first confirmation, not before the search starts (a
    metric of 2 s a call spent 40 s there under a 5 s budget); the search reports its metric calls."""
    from edgeopt.converters.quantize.budget import BudgetedSearch
    from edgeopt.converters.quantize.verdict import finish
    from edgeopt.metrics import MetricSpec
    from edgeopt.metrics.custom import clock

    _, _, search, confirm, fp32_run = _linear_model_search_data(40)
    path = _counting_metric(tmp_path)
    s = BudgetedSearch(fp32_run=fp32_run, search=search, confirm=confirm, bound=5.0, budget_s=3600,
                       metric_spec=MetricSpec(name=path), search_path=[tmp_path])
    assert len(s.halves) == 20 and not s.halves.scored
    before = clock(path).calls
    c = s.judge(fp32_run)
    assert c.met and s.halves.scored and c.halves_p90 == 0.0
    assert clock(path).calls - before == 1 + 2 + 2 * 20  # search part; held-back part and all; FP32 and c per half
    report = finish(s, c, c, None).report
    assert report["metric_time"]["calls"] >= clock(path).calls - before and "halves_rule" not in report


def test_a_slow_user_metric_leaves_the_halves_rule_to_the_validation(tmp_path):
    """When the halves rule's metric calls don't fit what is left of --search-budget, the search confirms by the
    point drops and leaves the halves to the final validation (which applies them to the written artifact),
    saying so; a metric fast enough for them (under 2 s in all) is always halved in the search."""
    from edgeopt.converters.quantize.budget import BudgetedSearch
    from edgeopt.metrics import MetricSpec

    _, _, search, confirm, fp32_run = _linear_model_search_data(40)
    s = BudgetedSearch(fp32_run=fp32_run, search=search, confirm=confirm, bound=5.0, budget_s=1.0,
                       metric_spec=MetricSpec(name=_counting_metric(tmp_path)), search_path=[tmp_path])
    assert not s.halves_deferred(per_call_s=1e-3) and "halves_rule" not in s.report  # 40 calls, 0.04 s
    assert s.halves_deferred(per_call_s=2.0)  # 80 s: over the budget
    assert "left to the final validation" in s.report["halves_rule"] and "--search-budget" in s.report["halves_rule"]


def test_options_passed_over_for_the_budget_are_reported():
    """When the options' share of --search-budget is spent, the options not scored are listed under
    options_skipped with that reason, not dropped without a word."""
    from edgeopt.converters.quantize.strategy import run_search

    _, _, search, confirm, fp32_run = _linear_model_search_data()

    def far_off():
        return None, lambda feed: {k: -v for k, v in fp32_run(feed).items()}  # every top-1 flipped

    result = run_search(options=[("preset", far_off), ("per-tensor", lambda: (None, fp32_run)),
                                 ("percentile", lambda: (None, fp32_run))], rank=None, with_float=None,
                        fp32_run=fp32_run, search=search, confirm=confirm, bound=1.0, budget_s=0)
    skipped = {s["what"]: s["why"] for s in result.report.get("options_skipped", [])}
    assert set(skipped) == {"per-tensor", "percentile"}
    assert all("--search-budget" in why for why in skipped.values())
