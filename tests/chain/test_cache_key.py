"""One key for a cached conversion (edgeopt/cache_key.py), used by bench's cache and the pipeline's: a profile
edit that changes the artifact changes the key (through the plan, which settles the profile's choices), an edit
that does not leaves it, identical plans share it, and both caches name an artifact by it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from edgeopt.cache_key import artifact_key
from edgeopt.plan import Recipe, make_plan
from edgeopt.profiles import load_profile

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"
PI5 = REPO / "device_profiles" / "pi5.yaml"


def _edited(tmp_path, name: str, edit) -> Path:
    data = yaml.safe_load(PI5.read_text())
    edit(data)
    path = tmp_path / name / "pi5.yaml"
    path.parent.mkdir()
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _key(profile_path, precision="int8") -> str:
    plan = make_plan(load_profile(str(profile_path)), backend="onnxruntime", precision=precision)
    return artifact_key(plan.hash, "0" * 64)


def _cpu(data) -> dict:
    return next(u for u in data["compute_units"] if u["kind"] == "cpu")


def _ort(data) -> dict:
    return next(b for b in data["backends"] if b["name"] == "onnxruntime")


def test_identical_plans_share_the_key_and_an_unrelated_profile_edit_keeps_it(tmp_path):
    assert _key(PI5) == _key(PI5)
    reworded = _edited(tmp_path, "reworded", lambda d: d.update(description="the same board, described otherwise"))
    assert _key(reworded) == _key(PI5)


@pytest.mark.parametrize("what,edit", [
    ("ISA without dot-product: another INT8 preset", lambda d: _cpu(d).update(isa=["asimd"])),
    ("the backend's settings", lambda d: _ort(d)["settings"].update(threads=2)),
    ("a GPU appears: FP16 hints", lambda d: d["compute_units"].append(
        {"kind": "gpu", "name": "some gpu", "cores": 1, "clock_ghz": 1.0, "peak_gops": {"fp16": 100.0}})),
])
def test_a_profile_edit_that_changes_the_artifact_changes_the_key(tmp_path, what, edit):
    edited = _edited(tmp_path, "edited", edit)
    assert _key(edited) != _key(PI5), what


def test_the_key_covers_model_data_and_tools(tmp_path, monkeypatch):
    import edgeopt.cache_key as ck

    base = artifact_key("p" * 64, "m" * 64)
    assert artifact_key("p" * 64, "n" * 64) != base
    data = tmp_path / "calib.npz"
    data.write_bytes(b"one")
    with_data = artifact_key("p" * 64, "m" * 64, calib=data)
    assert with_data != base
    data.write_bytes(b"two")
    assert artifact_key("p" * 64, "m" * 64, calib=data) != with_data
    monkeypatch.setattr(ck, "tool_versions", lambda: {"edgeopt": "0", "onnxruntime": "another"})
    assert artifact_key("p" * 64, "m" * 64) != base


@pytest.mark.onnxruntime
def test_bench_and_pipeline_name_the_same_conversion_by_the_same_key(tmp_path, monkeypatch):
    from edgeopt.bench.model import _convert_cached
    from edgeopt.files import file_sha256
    from edgeopt.pipeline.cache import cached_convert

    monkeypatch.setenv("EDGEOPT_CACHE_DIR", str(tmp_path / "cache"))
    prof = load_profile("pi5")
    built = _build(cached_convert(DIGITS, prof, recipe=Recipe(backend="onnxruntime", precision="fp32")))
    bench_dir = _convert_cached(DIGITS, file_sha256(DIGITS), prof, "onnxruntime", calib=None, eval_data=None,
                                input_shapes=None, precision="fp32")
    assert not built["cached"] and bench_dir.name == Path(built["artifact"]).name == f"onnxruntime-{built['key'][:32]}"
    assert _build(cached_convert(DIGITS, prof, recipe=Recipe(backend="onnxruntime", precision="fp32")))["cached"]
    threads2 = load_profile(str(_edited(tmp_path, "t2", lambda d: _ort(d)["settings"].update(threads=2))))
    rebuilt = _build(cached_convert(DIGITS, threads2, recipe=Recipe(backend="onnxruntime", precision="fp32")))
    assert not rebuilt["cached"] and rebuilt["key"] != built["key"]


def _build(result) -> dict:
    """cached_convert's answer as a dict (a dict today; a typed model once results are typed)."""
    return result if isinstance(result, dict) else result.model_dump()


def _record(db: Path, line: str) -> Path:
    """A MetaSchedule JSON database dir with one record line (its content is all the plan hashes)."""
    db.mkdir(parents=True, exist_ok=True)
    (db / "database_workload.json").write_text('["workload"]\n')
    (db / "database_tuning_record.json").write_text(line + "\n")
    return db


@pytest.mark.tvm
def test_a_tvm_tuning_database_is_in_the_plan_and_so_in_the_key(tmp_path, monkeypatch):
    monkeypatch.setenv("EDGEOPT_CACHE_DIR", str(tmp_path / "cache"))
    host = load_profile("host")

    def plan(recipe=None):
        return make_plan(host, backend="tvm", precision="fp32", recipe=recipe)

    untuned = plan()
    assert untuned.stages[-1].config.tuning_db_sha256 == "none" and plan().hash == untuned.hash
    cache_db = _record(tmp_path / "cache" / "tvm-tuning" / "0123abcd", "[0, 1]")  # what 'edgeopt tune' writes
    tuned = plan()
    assert tuned.stages[-1].config.tuning_db_sha256 != "none" and tuned.hash != untuned.hash
    assert artifact_key(tuned.hash, "0" * 64) != artifact_key(untuned.hash, "0" * 64)
    (cache_db / "database_tuning_record.json").write_text("[0, 1]\n[0, 2]\n")  # more trials: another database
    assert plan().hash != tuned.hash
    (cache_db / "logs").mkdir()
    (cache_db / "logs" / "tune.log").write_text("MetaSchedule's log is not the database")
    assert plan().hash == plan().hash
    named = _record(tmp_path / "mine", "[7]")  # a recipe's stages.tvm.tuning_db: that database's content only
    recipe = Recipe(stages={"tvm": {"tuning_db": str(named)}})
    before = plan(recipe)
    (named / "database_tuning_record.json").write_text("[8]\n")
    assert plan(recipe).hash != before.hash
    assert plan(Recipe(stages={"tvm": {"use_tuning_cache": False}})).stages[-1].config.tuning_db_sha256 == "none"


def test_the_code_the_key_hashes_includes_what_convert_and_plan_hand_their_work_to():
    """A change in one build's work or in the plan's resolution is a cache miss, as it was when that code sat in
    convert.py and plan.py."""
    from edgeopt.cache_key import code_files

    names = {name for name, _ in code_files()}
    assert {"edgeopt/convert.py", "edgeopt/convert_build.py", "edgeopt/plan.py", "edgeopt/option_resolution.py",
            "edgeopt/backend_choice.py", "edgeopt/config_errors.py", "edgeopt/chain.py"} <= names
    assert "converters/quantize/strategy.py" in names and "converters/prune_channels.py" in names
