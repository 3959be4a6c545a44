"""The plan: profile defaults, recipe and flag overrides, hashing, errors with exit codes."""

from __future__ import annotations

import json

import pytest
from fixtures_convert import write_profile

from edgeopt.enums import BackendName, Precision
from edgeopt.errors import BadInputError, ExitCode, MissingDependencyError, UsageError
from edgeopt.plan import load_recipe, make_plan
from edgeopt.profiles import load_profile_file


def _profile(tmp_path, **changes):
    return load_profile_file(write_profile(tmp_path, **changes))


def test_plan_from_profile_defaults(tmp_path):
    plan = make_plan(_profile(tmp_path))
    assert plan.backend == BackendName.ONNXRUNTIME
    assert plan.precision == Precision.FP32
    assert [s.name for s in plan.stages] == ["normalize", "onnxruntime"]
    ort = plan.stages[-1].config
    assert ort.threads == 1 and ort.provider == "CPUExecutionProvider"
    assert ort.graph_optimization_level.value == "all"


def test_flags_override_profile_and_hash_changes(tmp_path):
    prof = _profile(tmp_path)
    base = make_plan(prof)
    same = make_plan(prof)
    other = make_plan(prof, threads=3, input_shapes={"x": (1, 3, 8, 8)})
    assert other.stages[-1].config.threads == 3
    assert other.stages[0].config.input_shapes == {"x": (1, 3, 8, 8)}
    assert base.hash == same.hash and len({base, same}) == 1
    assert other.hash != base.hash
    assert len(base.hash) == 64 and "onnxruntime" in str(base)


def test_recipe_overrides_and_flags_win(tmp_path):
    r = tmp_path / "recipe.yaml"
    r.write_text("threads: 2\nstages:\n  onnxruntime: {save_optimized: true}\n  normalize: {min_cosine: 0.999}\n")
    prof = _profile(tmp_path)
    plan = make_plan(prof, recipe=r)
    assert plan.stages[-1].config.threads == 2 and plan.stages[-1].config.save_optimized is True
    assert plan.stages[0].config.min_cosine == 0.999
    assert make_plan(prof, recipe=r, threads=4).stages[-1].config.threads == 4


def test_recipe_unknown_key_did_you_mean(tmp_path):
    r = tmp_path / "recipe.yaml"
    r.write_text("precison: int8\n")
    with pytest.raises(BadInputError) as e:
        load_recipe(r)
    assert e.value.exit_code == ExitCode.BAD_INPUT
    assert "precison" in e.value.message and "did you mean 'precision'" in e.value.hint


def test_recipe_unknown_stage_key_did_you_mean(tmp_path):
    r = tmp_path / "recipe.yaml"
    r.write_text("stages:\n  onnxruntime: {thread: 2}\n")
    with pytest.raises(BadInputError) as e:
        make_plan(_profile(tmp_path), recipe=r)
    assert "thread" in e.value.message and "threads" in e.value.hint


def test_recipe_unknown_stage_name(tmp_path):
    r = tmp_path / "recipe.yaml"
    r.write_text("stages:\n  quantise: {}\n")
    with pytest.raises(BadInputError) as e:
        make_plan(_profile(tmp_path), recipe=r)
    assert "did you mean 'qdq'" in e.value.hint


def test_unknown_backend_is_usage_error(tmp_path):
    with pytest.raises(UsageError) as e:
        make_plan(_profile(tmp_path), backend="onnxruntim")
    assert e.value.exit_code == ExitCode.USAGE and "did you mean 'onnxruntime'" in e.value.hint


def test_backend_not_in_profile_warns(tmp_path):
    prof = _profile(tmp_path, backends=[{"name": "tflite"}, {"name": "onnxruntime"}])
    plan = make_plan(prof, backend="onnxruntime")
    assert plan.backend == BackendName.ONNXRUNTIME
    prof2 = _profile(tmp_path, name="other", backends=[{"name": "tvm"}])
    plan2 = make_plan(prof2, backend="onnxruntime")
    assert any("does not list backend 'onnxruntime'" in w for w in plan2.warnings)


def test_simulated_missing_backend_skipped_then_named(tmp_path, monkeypatch):
    """Simulated: openvino's libraries 'missing' (find_spec patched): the default falls through, a named one exits 4."""
    import edgeopt.backend_choice as choice_mod

    real = choice_mod._importable
    monkeypatch.setattr(choice_mod, "_importable", lambda m: False if m in ("openvino", "nncf") else real(m))
    prof = _profile(tmp_path, backends=[{"name": "openvino"}, {"name": "onnxruntime"}])
    assert make_plan(prof).backend == BackendName.ONNXRUNTIME
    with pytest.raises(MissingDependencyError) as e:
        make_plan(prof, backend="openvino")
    assert e.value.exit_code == ExitCode.MISSING_DEPENDENCY and "edgeopt[openvino]" in e.value.hint


def test_simulated_missing_openvino_cli_exit_4(tmp_path, cli, simulate_missing, tiny_model):
    prof = write_profile(tmp_path)
    r = cli("convert", str(tiny_model), "--profile", str(prof), "-o", str(tmp_path / "out"), "--backend", "openvino",
            "--json", env=simulate_missing("openvino", "nncf"))
    assert r.returncode == 4, r.stderr
    err = json.loads(r.stdout)["error"]
    assert "openvino" in err["message"] and "edgeopt[openvino]" in err["hint"]
    assert not (tmp_path / "out").exists()


def test_unknown_backend_cli_exit_2(tmp_path, cli, tiny_model):
    r = cli("convert", str(tiny_model), "--profile", str(write_profile(tmp_path)), "-o", str(tmp_path / "o"),
            "--backend", "openvno", "--dry-run")
    assert r.returncode == 2
    assert "did you mean 'openvino'" in r.stderr


def test_dry_run_json(tmp_path, cli, tiny_model):
    r = cli("convert", str(tiny_model), "--profile", str(write_profile(tmp_path)), "-o", str(tmp_path / "o"),
            "--dry-run", "--json", "--threads", "2")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["ok"] and out["dry_run"]
    stages = out["plan"]["stages"]
    assert [s["name"] for s in stages] == ["normalize", "onnxruntime"]
    assert stages[1]["config"]["threads"] == 2
    assert len(out["plan"]["plan_hash"]) == 64
    assert not (tmp_path / "o").exists()


def test_int8_plan_includes_qdq_when_available(tmp_path):
    try:
        plan = make_plan(_profile(tmp_path), precision="int8")
    except UsageError as e:
        pytest.skip(f"qdq stage not in this checkout yet: {e.message}")
    assert [s.name for s in plan.stages] == ["normalize", "qdq", "onnxruntime"]


def test_the_old_stage_name_quantize_is_read_as_qdq_in_a_request(tmp_path):
    """``stages: {quantize: ...}`` through the API (a ChainRequest, as a recipe or --set fill it): the qdq stage's
    config, the same plan and hash as under the new name, one warning in the plan's."""
    from edgeopt.options import ChainRequest

    prof = _profile(tmp_path)
    old = make_plan(prof, ChainRequest(precision="int8", stages={"quantize": {"calib_samples": 16}}))
    new = make_plan(prof, ChainRequest(precision="int8", stages={"qdq": {"calib_samples": 16}}))
    assert [s.name for s in old.stages] == ["normalize", "qdq", "onnxruntime"] and old.stages[1].config.calib_samples == 16
    assert old.hash == new.hash and old.options.stages == {"qdq": {"calib_samples": 16}}
    renamed = [w for w in old.warnings if "'quantize' is now called 'qdq'" in w]
    assert len(renamed) == 1 and not [w for w in new.warnings if "is now called" in w]
    with pytest.raises(UsageError, match=r"both quantize\.calib_samples and qdq\.calib_samples") as e:
        make_plan(prof, ChainRequest(precision="int8", stages={"qdq": {"calib_samples": 8}, "quantize": {"calib_samples": 16}}))
    assert e.value.exit_code == ExitCode.USAGE and e.value.hint == "give it once, as qdq.calib_samples"


def test_bad_enum_flags_are_usage_errors(tmp_path):
    with pytest.raises(UsageError) as e:
        make_plan(_profile(tmp_path), precision="int4")
    assert e.value.exit_code == ExitCode.USAGE and "fp32" in e.value.message
    with pytest.raises(UsageError, match="--calib-method"):
        make_plan(_profile(tmp_path), calib_method="entropyy")


@pytest.mark.tflite
def test_export_c_is_a_chain_option_in_the_plan_not_a_recipe_rewrite(tmp_path, cli):
    from edgeopt.profiles import load_profile
    from fixtures import fixture_model

    digits = fixture_model("digits_cnn")
    plain = make_plan(load_profile("host"), backend="tflite", precision="fp32")
    planned = make_plan(load_profile("host"), backend="tflite", precision="fp32", export_c=True, c_name="digits_cnn")
    config = planned.stages[-1].config
    assert config.export_c and config.c_name == "digits_cnn" and not plain.stages[-1].config.export_c
    assert planned.hash != plain.hash and planned.options.stages == {}  # no recipe override made for it
    args = ("convert", str(digits), "--profile", "host", "--backend", "tflite", "--precision", "fp32", "--export-c",
            "--dry-run", "--json")
    r = cli(*args)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["plan_hash"] == planned.hash  # the flag is the option, nothing else
    (tmp_path / "r.yaml").write_text("stages: {tflite: {c_name: firmware}}\n")
    r = cli(*args, "--recipe", str(tmp_path / "r.yaml"))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["plan"]["stages"][-1]["config"]["c_name"] == "firmware"  # a recipe's name still wins


def test_export_c_on_a_backend_without_a_c_array_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="--export-c") as e:
        make_plan(_profile(tmp_path), export_c=True)
    assert e.value.exit_code == ExitCode.USAGE and "--backend tflite" in e.value.hint
    with pytest.raises(UsageError, match="c_name"):
        make_plan(_profile(tmp_path), c_name="fw")
