"""The confidence bound on an accuracy drop (``edgeopt.metrics.confidence``): Tango's paired limit for metrics that
count samples, a seeded bootstrap for the others; an eval set too small to confirm anything refused with the
number of samples it needs (exit 5), and let through by a lower ``--confidence``."""

from __future__ import annotations

import numpy as np
import pytest

from edgeopt.metrics.confidence import (
    DEFAULT_CONFIDENCE,
    bootstrap_upper,
    look_confidence,
    paired_upper,
    samples_needed,
    z_of,
)


def test_no_discordant_sample_is_the_exact_limit_not_the_lower_score_limit():
    """No sample lost or gained: the exact limit 1 - (1 - c)^(1/n), above the score limit z² / (n + z²) that
    Tango's statistic gives there (0.30 points on 150 samples at 0.75, where the exact limit is 0.92)."""
    for c in (0.75, 0.9):
        z2 = z_of(c) ** 2
        for n in (50, 100, 150, 300):
            assert paired_upper(0, 0, n, c) == pytest.approx(100 * (1 - (1 - c) ** (1 / n)), rel=1e-6)
            assert paired_upper(0, 0, n, c) > 100 * z2 / (n + z2)
    assert round(paired_upper(0, 0, 150, 0.75), 2) == 0.92


def _binom_cdf(k: int, n: int, p: float) -> float:
    from math import comb

    return sum(comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k + 1))


@pytest.mark.parametrize("n", [42, 150, 500])
@pytest.mark.parametrize("confidence", [0.75, 0.9])
@pytest.mark.parametrize("bound", [0.5, 1.0, 2.0])
def test_a_candidate_that_loses_exactly_the_bound_passes_at_most_one_time_in_one_minus_confidence(n, confidence,
                                                                                                  bound):
    """The limit's promise, computed exactly: a candidate that loses a share ``bound`` of all samples (and gains
    none) is seen losing k of n with binomial chance; it passes when the limit of (k, 0, n) is within the bound,
    and the chance of that is at most 1 - confidence. Tango's score limit alone broke it at few lost samples
    (0.5 points on 150 samples at 0.75: it passed 47 % of the time)."""
    passing = [k for k in range(n + 1) if paired_upper(k, 0, n, confidence) <= bound + 1e-9]
    chance = _binom_cdf(max(passing), n, bound / 100) if passing else 0.0
    assert chance <= 1 - confidence + 1e-9


def test_gains_offset_losses_and_more_samples_narrow_the_limit():
    assert paired_upper(3, 3, 300, 0.9) < paired_upper(3, 0, 300, 0.9)
    assert paired_upper(2, 0, 600, 0.9) < paired_upper(1, 0, 300, 0.9)
    assert paired_upper(5, 0, 300, 0.95) > paired_upper(5, 0, 300, 0.9) > 100 * 5 / 300


def test_the_looks_share_the_risk():
    risks = [1 - look_confidence(0.9, k) for k in range(1, 2000)]
    assert sum(risks) < 0.1 and risks[0] == pytest.approx(0.1 * 6 / np.pi ** 2)


def test_the_samples_needed_are_the_fewest_that_confirm_a_candidate_changing_nothing():
    n = samples_needed(2.0, 0.9)
    assert paired_upper(0, 0, n, 0.9) <= 2.0 < paired_upper(0, 0, n - 1, 0.9)
    assert samples_needed(2.0, 0.6) < n and samples_needed(0.0, 0.9) is None


def test_the_bootstrap_is_seeded_the_same_figure_every_time():
    rng = np.random.default_rng(3)
    fp32 = np.full(60, 100.0)
    cand = 100.0 - np.abs(rng.standard_normal(60)) * 3
    first = bootstrap_upper(fp32, cand, 0.9)
    assert first == bootstrap_upper(fp32, cand, 0.9) and first > float(np.mean(fp32 - cand))
    assert bootstrap_upper(fp32, cand, 0.9, seed=1) != first  # the seed, not luck, makes it repeat
    assert bootstrap_upper(fp32[:5], cand[:5], 0.9) is None  # too few samples to resample


def test_every_built_in_metric_gives_per_sample_scores_that_average_to_its_figure():
    from edgeopt.metrics import MetricName, MetricSpec, metric_for_outputs

    rng = np.random.default_rng(0)
    ref = [{"y": rng.standard_normal((1, 6, 12)).astype(np.float32)} for _ in range(20)]
    got = [{"y": o["y"] + 0.5 * rng.standard_normal(o["y"].shape).astype(np.float32)} for o in ref]
    maps = [{"y": rng.standard_normal((1, 4, 5, 6)).astype(np.float32) + [[[[2.0]], [[0]], [[0]], [[0]]]]}
            for _ in range(20)]  # segmentation logits, class 0 (the background) leading: judged off it
    maps_got = [{"y": o["y"] + 0.8 * rng.standard_normal(o["y"].shape).astype(np.float32)} for o in maps]
    cases = [(ref, got, name) for name in (MetricName.TOP1, MetricName.POSITION_AGREEMENT, MetricName.COSINE)]
    cases += [(maps, maps_got, MetricName.POSITION_AGREEMENT)]
    probs = [{"y": 1 / (1 + np.exp(-o["y"]))} for o in ref]
    cases += [(probs, [{"y": 1 / (1 + np.exp(-o["y"]))} for o in got], MetricName.MAP_IOU)]
    for r, g, name in cases:
        m = metric_for_outputs(r, None, MetricSpec(name=name))
        rows = m.rows(g)
        figure = m.aggregate(rows) if m.aggregate is not None else float(np.mean(rows))
        assert figure == pytest.approx(m.score_outputs(g)) and len(rows) == 20 and m.fp32_rows is not None
        assert figure < 100, name  # the noise moved something: the equality is not 100 == 100


def test_a_small_eval_set_is_refused_with_the_samples_it_needs_before_any_candidate_is_built():
    from edgeopt.converters.quantize.strategy import run_search
    from edgeopt.data import Dataset
    from edgeopt.errors import GateFailedError

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    search, confirm = Dataset({"x": rng.standard_normal((160, 1, 4)).astype(np.float32)}, ranks={"x": 2}).split(0.5)
    built = []

    def fp32(feed):
        return {"y": feed["x"] @ w}

    def option():
        built.append(1)
        return None, fp32

    kw = dict(options=[("preset", option)], rank=None, with_float=None, fp32_run=fp32, search=search,
              confirm=confirm, bound=2.0, budget_s=60)
    with pytest.raises(GateFailedError) as err:
        run_search(**kw)
    from edgeopt.validation_model import eval_samples_for

    need = samples_needed(2.0, look_confidence(DEFAULT_CONFIDENCE, 1))
    total = eval_samples_for(need, 0.5)
    assert err.value.exit_code == 5 and not built and total > 160
    assert f"confirming needs {need} held-back samples, an --eval set of at least {total} samples" in str(err.value)
    assert err.value.details["samples_needed"] == total
    result = run_search(**kw, confidence=0.6)  # a lower confidence: the same 80 held back confirm it
    assert result.best is not None and built


@pytest.mark.onnxruntime
def test_convert_refuses_a_small_eval_set_with_the_figure_and_writes_nothing(tmp_path, cli):
    """The bundled MNIST model, 120 of its test samples, a 1-point bound: exit 5 naming the eval size needed,
    nothing written, on the ONNX Runtime INT8 search (the same judge on every backend)."""
    import json

    d = np.load("fixtures/data/mnist_test.npz")
    small = tmp_path / "small.npz"
    np.savez(small, input=d["input"][:120], labels=d["labels"][:120])
    out = tmp_path / "out"
    r = cli("convert", "fixtures/models/mnist_cnn.onnx", "--profile", "host", "--backend", "onnxruntime",
            "--precision", "int8", "--calib", "fixtures/data/mnist_calib.npz", "--eval", str(small),
            "--max-accuracy-drop", "1", "-o", str(out), "--json")
    from edgeopt.validation_model import eval_samples_for

    total = eval_samples_for(samples_needed(1.0, look_confidence(DEFAULT_CONFIDENCE, 1)), 0.5)
    assert r.returncode == 5, r.stderr
    err = json.loads(r.stdout)
    assert f"an --eval set of at least {total} samples" in json.dumps(err) and not out.exists()
    assert err["error"]["details"]["samples_needed"] == total


@pytest.mark.parametrize("units, speedup, said", [
    ({"quantized": 3, "float": 40, "file": "model.onnx"}, 0.97, True),  # few ops INT8, no faster: the result says so
    ({"quantized": 3, "float": 40, "file": "model.onnx"}, 1.6, False),  # few ops INT8 but faster: a real gain
    ({"quantized": 30, "float": 13, "file": "model.onnx"}, 0.97, False),  # mostly INT8: not "in name only"
    ({"quantized": 3, "float": 40, "file": "model.onnx"}, None, "mostly")])  # not timed: the share, no speed claim
def test_int8_in_name_only_is_the_verdict(units, speedup, said):
    from edgeopt.int8_verdict import int8_verdict
    from edgeopt.manifest_types import StageEntry

    stages = [StageEntry(name="qdq", report={"accuracy_aware": {"speed": {"speedup_vs_fp32": speedup}}})]
    verdict = int8_verdict("int8", units, stages)
    assert (verdict is not None) is bool(said)
    if said is True:
        assert verdict.startswith("INT8 in name only: 3 of 43 compute ops in model.onnx are quantized")
    if said == "mostly":  # an ARM board's artifact, not timed on this machine
        assert verdict.startswith("mostly float: 3 of 43 compute ops") and "speed was not measured here" in verdict
    assert int8_verdict("fp32", units, stages) is None
