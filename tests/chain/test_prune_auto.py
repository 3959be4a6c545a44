"""``--prune auto``: the largest ratio whose recovered student stays within --max-accuracy-drop, by bisection,
judged on calibration samples that neither pruning nor recovery saw; the validation on --eval checks it again."""

from __future__ import annotations

import json

import pytest

from edgeopt.converters.prune_auto import bisect_order
from edgeopt.converters.recover import train_extra_missing
from edgeopt.errors import UsageError
from edgeopt.plan import Recipe, make_plan
from edgeopt.profiles import load_profile
from fixtures import fixture_data, fixture_model

needs_train = pytest.mark.skipif(train_extra_missing() is not None, reason="needs the train extra (edgeopt[train])")


@pytest.mark.parametrize("largest_ok", [-1, 0, 2, 3, 6])
def test_bisection_finds_the_largest_ratio_within_in_three_probes_of_seven(largest_ok):
    best, tried, complete = bisect_order(7, lambda i: i <= largest_ok, lambda: 1.0)
    assert best == largest_ok and len(tried) == 3 and complete


def test_bisection_out_of_budget_keeps_the_best_found_so_far():
    best, tried, complete = bisect_order(7, lambda i: i <= 5, lambda: -1.0)
    assert (best, tried, complete) == (3, [3], False)  # one probe always runs


@pytest.mark.onnxruntime
def test_auto_without_a_bound_is_a_usage_error_naming_the_flag():
    with pytest.raises(UsageError) as e:
        make_plan(load_profile("host"), backend="onnxruntime", precision="fp32", prune="auto")
    assert "--max-accuracy-drop" in e.value.message


@pytest.mark.onnxruntime
def test_auto_plans_a_searching_prune_stage_from_flag_or_recipe():
    for kw in ({"prune": "auto", "max_accuracy_drop": 1.0},
               {"recipe": Recipe(prune="auto", max_accuracy_drop=0.5, search_budget=30, recover_budget=500)}):
        plan = make_plan(load_profile("host"), backend="onnxruntime", precision="fp32", **kw)
        prune = next(s for s in plan.stages if s.name == "prune").config
        assert prune.auto and prune.bound.max_accuracy_drop in (1.0, 0.5) and prune.ratio == 0.0
    assert prune.bound.search_budget == 30  # --search-budget bounds the whole search; --recover-budget does not
    with pytest.raises(UsageError):
        make_plan(load_profile("host"), backend="onnxruntime", precision="fp32", prune="half")


@needs_train
@pytest.mark.onnxruntime
def test_each_candidates_recovery_is_planned_with_the_recipes_recover_settings(cli):
    """The recover config every candidate is distilled with is the plan's (the recover stage's, recipe overrides
    included), in the prune stage's config: --dry-run shows it and the plan hash covers it."""
    from edgeopt.converters.prune_auto import candidate_recover_config

    def plan(**recover):
        recipe = Recipe(prune="auto", max_accuracy_drop=1.0, recover_budget=30, stages={"recover": recover})
        p = make_plan(load_profile("host"), backend="onnxruntime", precision="fp32", recipe=recipe)
        return p, {s.name: s.config for s in p.stages}

    five, stages = plan(max_epochs=5, seed=3)
    assert stages["prune"].auto_recover_config == stages["recover"] and stages["recover"].max_epochs == 5
    candidate = candidate_recover_config(stages["prune"], 7.0)
    assert (candidate.budget_s, candidate.required, candidate.max_epochs, candidate.seed) == (7.0, True, 5, 3)
    six, stages6 = plan(max_epochs=6)
    assert stages6["prune"].auto_recover_config.max_epochs == 6 and six.hash != five.hash
    unrecovered = make_plan(load_profile("host"), backend="onnxruntime", precision="fp32", prune="auto",
                            max_accuracy_drop=1.0, recover=False)
    prune = next(s.config for s in unrecovered.stages if s.name == "prune")
    assert prune.auto_recover_config is None and not prune.auto_recover  # --no-recover: judged as pruned
    r = cli("convert", str(fixture_model("digits_cnn")), "--profile", "host", "--backend", "onnxruntime",
            "--precision", "fp32", "--prune", "auto", "--max-accuracy-drop", "1", "--recover-budget", "30",
            "--calib", str(fixture_data("digits_calib")), "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    shown = {s["name"]: s["config"] for s in json.loads(r.stdout)["plan"]["stages"]}
    assert shown["prune"]["auto_recover_config"] == shown["recover"] and shown["recover"]["budget_s"] == 30


@needs_train
@pytest.mark.onnxruntime
@pytest.mark.slow
def test_prune_auto_picks_a_ratio_within_the_bound_on_the_digits_cnn(cli, tmp_path):
    # round_to 8 from the recipe: the host's own multiple is 16 on AVX-512 CPUs, where 0.1-0.3 keep every channel
    # of the digits CNN's 24- and 48-channel Convs (tested below), so the search would have little to choose from
    # bound 3: the 51 held-back calibration images judge each candidate, one image is 1.96 points, so a bound of 1
    # would ask a few seconds of distillation on a loaded machine for no flipped image at all (a coin toss at 0.2)
    # the budgets are counts, not seconds: each candidate distils for at most 30 epochs (early stopping by
    # patience), and the time budgets are far above what that takes, so a loaded machine changes the run's
    # length, not its outcome
    (tmp_path / "r.yaml").write_text("stages: {prune: {round_to: 8}, recover: {max_epochs: 30}}\n")
    out = tmp_path / "auto"
    r = cli("convert", str(fixture_model("digits_cnn")), "--profile", "host", "--backend", "onnxruntime",
            "--precision", "fp32", "--prune", "auto", "--max-accuracy-drop", "3", "--search-budget", "36000",
            "--recover-budget", "36000",
            "--calib", str(fixture_data("digits_calib")), "--eval", str(fixture_data("digits_test")),
            "--recipe", str(tmp_path / "r.yaml"), "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    res = json.loads(r.stdout)
    stages = {s["name"]: s for s in json.loads((out / "manifest.json").read_text())["stages"]}
    rep = stages["prune"]["report"]
    assert rep["auto"] and 1 <= len(rep["tried"]) <= 3
    within = [t["ratio"] for t in rep["tried"] if t["within"]]
    assert rep["ratio"] == max(within) and rep["flops_reduction"] > 0.1
    assert all(t["drop"] <= 3.0 for t in rep["tried"] if t["within"])
    assert stages["recover"]["report"]["done_by"] == "prune auto search"
    assert stages["prune"]["checks"]["output_shapes_unchanged"]
    assert res["validation"]["accuracy_drop"] <= 3.0  # on digits_test, which the search never saw


@pytest.mark.onnxruntime
def test_ratios_that_prune_the_same_channels_are_tried_once():
    """At AVX-512's 16-channel rounding the digits CNN's ratios 0.1-0.3 make one model: the auto search's grid keeps
    the smallest ratio of each distinct pruning, and says why each other ratio was left out."""
    from edgeopt.converters.prune_auto import effective_grid
    from edgeopt.converters.prune_channels import kept_channels_at, prune_channels
    from edgeopt.converters.prune_config import PruneConfig
    from edgeopt.model import load_onnx

    model = load_onnx(fixture_model("digits_cnn"))
    ratios = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
    grid16, left16 = effective_grid(ratios, kept_channels_at(model, PruneConfig(round_to=16)))
    grid1, left1 = effective_grid(ratios, kept_channels_at(model, PruneConfig(round_to=1)))
    assert len(grid16) < len(grid1) and set(grid16) | {float(r) for r in left16} == set(ratios)
    assert grid16 == tuple(sorted(grid16)) and "removes no channel" in left16["0.1"]

    def flops(ratio, round_to):
        return prune_channels(model, PruneConfig(ratio=ratio, round_to=round_to))[1]["flops_after"]

    cuts = [flops(r, 16) for r in grid16]
    assert len(set(cuts)) == len(cuts)  # each kept ratio prunes differently
    for r, why in left16.items():
        assert "same channels as" in why or "removes no channel" in why
        if "same channels as" in why:  # the ratio left out builds the very model of the one it names
            assert flops(float(r), 16) == flops(float(why.rsplit(" ", 1)[1]), 16)


@needs_train
@pytest.mark.onnxruntime
def test_each_candidate_is_distilled_by_the_plain_function_with_its_planned_config(tmp_path, monkeypatch):
    """The search distils a candidate through ``recover.distil_student`` (the recover stage's work, not that stage
    run inside this one) with the plan's recover config and the candidate's share of the budget; a Ctrl-C during
    that distillation (simulated at its first epoch, as the recover tests do) is said once and ends the search."""
    from pathlib import Path

    from edgeopt.converters import recover, recover_train
    from edgeopt.converters.base import ChainContext, Intermediate
    from edgeopt.converters.prune import Prune
    from edgeopt.data import load_data
    from edgeopt.model import graph_inputs, load_onnx

    # a budget no candidate's share can run out of before its first epoch, loaded machine or not: the Ctrl-C is
    # simulated at that epoch
    recipe = Recipe(prune="auto", max_accuracy_drop=1.0, search_budget=3600,
                    stages={"prune": {"round_to": 8}, "recover": {"max_epochs": 5, "seed": 3}})
    plan = make_plan(load_profile("host"), backend="onnxruntime", precision="fp32", recipe=recipe)
    prune_config = next(s.config for s in plan.stages if s.name == "prune")
    calls, real_distil, real_train = [], recover.distil_student, recover_train.distill

    def spy(student_model, reference, calib, config, work_dir, **kw):
        calls.append((Path(student_model), config, len(calib)))
        return real_distil(student_model, reference, calib, config, work_dir, **kw)

    def ctrl_c_at_first_epoch(*args, **kw):
        def interrupt(epoch, value):
            raise KeyboardInterrupt

        return real_train(*args, on_epoch=interrupt, **kw)

    monkeypatch.setattr(recover, "distil_student", spy)
    monkeypatch.setattr(recover_train, "distill", ctrl_c_at_first_epoch)
    src = fixture_model("digits_cnn")
    calib = load_data(fixture_data("digits_calib"), graph_inputs(load_onnx(src)), role="calib")
    ctx = ChainContext(work_dir=tmp_path, artifact_dir=tmp_path / "a", reference_model=src, calib=calib, threads=2)
    Prune().run(Intermediate(src), prune_config, ctx)
    report = ctx.record.report
    assert len(calls) == 1 and report["stopped"] == "interrupted" and report["tried"][0]["stopped"] == "interrupted"
    (student, config, samples), = calls
    assert (config.max_epochs, config.seed, config.required) == (5, 3, True) and 1.0 <= config.budget_s <= 3600
    assert samples == report["train_samples"] and student.name.startswith("ratio-")
    assert ctx.warnings.count(recover.INTERRUPTED) == 1
