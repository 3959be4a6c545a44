"""The chain options, declared once (edgeopt.options): the recipe, the pipeline target, the API's keywords,
``ConvertOptions`` and the CLI flags make the same plan; unknown options are errors with "did you mean"."""

from __future__ import annotations

import json

import pytest
from fixtures_convert import write_profile
from pydantic import ValidationError

from edgeopt.convert import convert
from edgeopt.enums import Precision
from edgeopt.errors import ExitCode, UsageError
from edgeopt.options import ChainRequest, ConvertOptions
from edgeopt.pipeline.recipe import Gates, Target, parse_recipe
from edgeopt.pipeline.run import plan_recipe
from edgeopt.plan import Recipe, make_plan
from edgeopt.profiles import load_profile_file

ASKED = {"precision": "fp32", "prune": 0.3, "recover": False, "threads": 2, "min_cosine": 0.99,
         "calib_method": "percentile", "search_budget": 30.0}
FLAGS = ["--precision", "fp32", "--prune", "0.3", "--no-recover", "--threads", "2", "--min-cosine", "0.99",
         "--calib-method", "percentile", "--search-budget", "30"]


def test_unknown_keyword_is_usage_error_with_did_you_mean(tmp_path):
    prof = write_profile(tmp_path)
    with pytest.raises(UsageError) as e:
        convert(None, str(prof), tmp_path / "o", precison="int8", dry_run=True)
    assert e.value.exit_code == ExitCode.USAGE and "precison" in e.value.message
    assert "did you mean 'precision'" in e.value.hint
    with pytest.raises(UsageError) as e:
        make_plan(load_profile_file(prof), prun=0.3)
    assert "did you mean 'prune'" in e.value.hint


def test_options_models_reject_unknown_keys():
    import edgeopt
    from edgeopt.bench.api import BenchOptions

    assert (edgeopt.ConvertOptions, edgeopt.BenchOptions) == (ConvertOptions, BenchOptions)  # the public API
    with pytest.raises(ValidationError, match="extra"):
        ConvertOptions(precison=Precision.INT8)
    with pytest.raises(ValidationError, match="extra"):
        ChainRequest(thread=2)
    with pytest.raises(ValidationError):  # frozen
        ConvertOptions().threads = 2  # type: ignore[misc]


def test_bad_keyword_value_names_the_flag(tmp_path):
    prof = str(write_profile(tmp_path))
    with pytest.raises(UsageError) as e:
        convert(None, prof, tmp_path / "o", prune_mode="2:5", dry_run=True)
    assert "--prune-mode '2:5'" in e.value.message and "2:4" in e.value.message
    with pytest.raises(UsageError, match="out of range"):
        convert(None, prof, tmp_path / "o", prune=1.5, dry_run=True)


def test_keywords_and_options_object_make_the_same_plan(tmp_path):
    prof = str(write_profile(tmp_path))
    by_keyword = convert(None, prof, tmp_path / "o", dry_run=True, **ASKED)
    by_object = convert(None, prof, tmp_path / "o", ConvertOptions(dry_run=True, **ASKED))
    with_nones = convert(None, prof, tmp_path / "o", dry_run=True, force=None, input_shapes=None, **ASKED)
    assert with_nones.plan == by_keyword.plan  # None is "not given", as the keyword API always took it
    assert by_keyword.plan.hash == by_object.plan.hash
    default = convert(None, prof, tmp_path / "o", dry_run=True)
    assert default.plan != by_object.plan  # the options did reach the plan
    with pytest.raises(UsageError, match="not both"):
        convert(None, prof, tmp_path / "o", ConvertOptions(dry_run=True), threads=2)


def test_recipe_cli_and_pipeline_target_make_the_same_plan(tmp_path, cli, tiny_model):
    prof = write_profile(tmp_path)
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text("".join(f"{k}: {v if not isinstance(v, bool) else str(v).lower()}\n" for k, v in ASKED.items()))

    def dry(*args):
        r = cli("convert", str(tiny_model), "--profile", str(prof), "--dry-run", "--json", *args)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["plan"]["plan_hash"]

    by_flags, by_recipe = dry(*FLAGS), dry("--recipe", str(recipe))
    assert by_flags == by_recipe != dry()
    target = parse_recipe({"model": {"path": "m.onnx"}, "targets": [{"name": "t", "profile": "x", **ASKED}]},
                          "edgeopt.yaml").targets[0]
    plan = make_plan(load_profile_file(prof), recipe=plan_recipe(target, Gates()))
    assert plan.hash == by_flags


def test_flags_override_the_recipe_and_stage_overrides_merge(tmp_path):
    prof = load_profile_file(write_profile(tmp_path))
    recipe = Recipe(threads=4, stages={"onnxruntime": {"save_optimized": True}})
    plan = make_plan(prof, ChainRequest(threads=2, stages={"normalize": {"min_cosine": 0.999}}), recipe=recipe)
    assert plan.stages[-1].config.threads == 2 and plan.stages[-1].config.save_optimized is True
    assert plan.stages[0].config.min_cosine == 0.999


def test_pipeline_target_takes_every_chain_option():
    target = Target(name="t", search_budget=30, min_speedup=1.2)
    assert plan_recipe(target, Gates()).search_budget == 30
    accuracy_aware = Target(name="t", accuracy_aware=True)
    assert plan_recipe(accuracy_aware, Gates(max_accuracy_drop=1.0)).max_accuracy_drop == 1.0
    assert plan_recipe(Target(name="t"), Gates(max_accuracy_drop=1.0)).max_accuracy_drop is None


# ----------------------------------------------------------------------------- remote_bench's options


def _here(tmp_path):
    import sys

    from edgeopt.remote.inventory import make_device

    return make_device(name="here", host="localhost", profile="host", python=sys.executable,
                       work_dir=str(tmp_path / "work"))


def test_remote_bench_options_unknown_or_local_only_are_usage_errors(remote_env, tmp_path, tiny_artifact):
    from edgeopt.bench.api import BenchOptions
    from edgeopt.remote.bench import remote_bench

    with pytest.raises(UsageError) as e:
        remote_bench(_here(tmp_path), tiny_artifact, store=False, min_run=3)
    assert "did you mean 'min_runs'" in e.value.hint
    with pytest.raises(UsageError) as e:
        remote_bench(_here(tmp_path), tiny_artifact, store=False, keeep=True)
    assert "did you mean 'keep'" in e.value.hint
    with pytest.raises(UsageError, match="per_layer"):  # not silently ignored on a device
        remote_bench(_here(tmp_path), tiny_artifact, BenchOptions(per_layer=True, store=False))
    with pytest.raises(UsageError) as e:
        remote_bench(_here(tmp_path), tiny_artifact, store=False, convert_options={"precison": "int8"})
    assert "did you mean 'precision'" in e.value.hint


def test_remote_bench_takes_bench_and_convert_options(remote_env, tmp_path, remote_tiny_model):
    from edgeopt.bench.api import BenchOptions
    from edgeopt.remote.bench import remote_bench
    from edgeopt.remote.transport import LocalTransport

    dev = _here(tmp_path)
    res = remote_bench(dev, remote_tiny_model["model"], BenchOptions(min_runs=3, min_seconds=0, warmup=1, store=False),
                       convert_options=ConvertOptions(backend="onnxruntime", precision=Precision.FP32),
                       transport=LocalTransport(dev.work_dir))
    assert res["converted"]["precision"] == "fp32" and res["converted"]["backend"] == "onnxruntime"
    assert res["precision"] == "fp32" and res["latency_ms"]["n"] >= 3
