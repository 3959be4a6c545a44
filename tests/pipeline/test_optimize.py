"""``edgeopt optimize``: Pareto front, and a real search on the digits CNN (winner, waterfall, recipe)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures import fixture_data, fixture_model


def test_pareto_front_keeps_only_undominated_points():
    from edgeopt.optimize.pareto import pareto_front

    pts = [{"label": "a", "p50_ms": 1.0, "accuracy": 90.0}, {"label": "b", "p50_ms": 2.0, "accuracy": 95.0},
           {"label": "c", "p50_ms": 3.0, "accuracy": 94.0},  # slower and less accurate than b
           {"label": "d", "p50_ms": 0.5, "accuracy": 80.0}, {"label": "e", "p50_ms": 1.5, "accuracy": 90.0},
           {"label": "f", "p50_ms": None, "accuracy": 99.0}]
    assert [p["label"] for p in pareto_front(pts)] == ["d", "a", "b"]
    assert pareto_front([]) == []


def test_each_backend_that_tunes_kernels_gets_a_note_on_why_optimize_did_not_tune():
    from edgeopt.converters.registry import backend_hooks
    from edgeopt.optimize.optimizer import TUNE_MIN_BUDGET_MIN, _tune_notes

    class Bench:
        def __init__(self, left_min: float):
            self.left = left_min * 60

        def left_s(self) -> float:
            return self.left

    tuners = [b.value for b, h in backend_hooks().items() if h.tunes]
    assert tuners  # TVM's MetaSchedule
    assert _tune_notes(Bench(60), []) == [f"{b}-tune: the {b} backend is not installed" for b in tuners]
    short = _tune_notes(Bench(TUNE_MIN_BUDGET_MIN / 2), tuners)
    assert len(short) == len(tuners) and all("min of budget left" in n for n in short)
    assert all("not run by optimize" in n for n in _tune_notes(Bench(TUNE_MIN_BUDGET_MIN * 2), tuners))


def test_bad_bound_is_a_usage_error(cli, tmp_path):
    r = cli("optimize", str(fixture_model("digits_cnn")), "--max-accuracy-drop", "-1", "--json")
    assert r.returncode == 2, r.stderr
    assert "negative" in json.loads(r.stdout)["error"]["message"]


@pytest.mark.slow
@pytest.mark.openvino
def test_optimize_digits_finds_a_winner_within_the_bound(cli, tmp_path):
    env = {"EDGEOPT_CACHE_DIR": str(tmp_path / "cache"), "EDGEOPT_DATA_DIR": str(tmp_path / "data")}
    out = tmp_path / "best"
    r = cli("optimize", str(fixture_model("digits_cnn")), "--profile", "host", "--max-accuracy-drop", "1",
            "--calib", str(fixture_data("digits_calib")), "--eval", str(fixture_data("digits_test")),
            "-o", str(out), "--time-budget", "10", "--json", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    res = json.loads(r.stdout)  # exactly one JSON object on stdout, library prints included
    w = res["winner"]
    assert w["feasible"] and w["accuracy_basis"] == "labels" and w["accuracy_drop"] <= 1.0
    built = [c for c in res["candidates"] if c["p50_ms"] is not None]
    assert w["p50_ms"] == min(c["p50_ms"] for c in built if c["feasible"])
    steps = [s["step"] for s in res["waterfall"]]  # every INT8 mode x backend and native float tried is a row
    assert steps[:4] == ["baseline", "fusion", "pruned", "recovered"]
    assert {"int8", "float"} <= set(steps[4:]) <= {"int8", "float", "early-exit"}
    assert all(s["p50_ms"] > 0 and s["accuracy"] is not None for s in res["waterfall"] if not s.get("error"))
    int8 = [c for c in res["candidates"] if c["step"] == "int8"]
    assert all(c["target"].get("quant_mode") in ("static", None) for c in int8)  # a CNN: static only
    steps = {s["step"]: s for s in res["waterfall"]}
    assert "prune auto" in steps["recovered"]["label"] and "no-recover" in steps["pruned"]["label"]
    recovered = next(c for c in res["candidates"] if c["step"] == "recovered")
    assert 0 < recovered["target"]["search_budget"] <= 120  # capped by optimize's own budget
    assert {"onnxruntime", "openvino"} <= {c["target"].get("backend") for c in res["candidates"]}
    front = res["pareto"]
    repeats = {c["label"] for c in res["candidates"] if c["repeats_base"]}  # early exit that kept no exit: its base
    assert front and w["label"] in [p["label"] for p in front] and not repeats & {p["label"] for p in front}
    for p in front:  # nothing in the front is beaten on both figures by another candidate
        assert not any(c["p50_ms"] < p["p50_ms"] and c["accuracy"] > p["accuracy"] for c in built)
    assert (out / "manifest.json").is_file()
    recipe = Path(res["recipe"])
    r = cli("pipeline", "run", str(recipe), "--bench", "none", "--output", str(tmp_path / "dist"), "--json", env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    summary = json.loads(r.stdout)
    t = summary["targets"][0]
    assert t["status"] == "ok" and t["backend"] == w["target"]["backend"]
    assert t["validation"]["accuracy_drop"] <= 1.0
