"""``edgeopt pipeline``: recipe checks, init → run, dist/ contents, gates (exit 5), cache hits, determinism."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from fixtures import fixture_data, fixture_model

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "edgeopt.yaml"


def _recipe(path: Path, **changes) -> Path:
    """The example recipe with absolute fixture paths, and ``changes`` applied at the top level."""
    data = yaml.safe_load(EXAMPLE.read_text())
    data["model"]["path"] = str(fixture_model("mnist_cnn"))
    data["data"] = {"calib": str(fixture_data("mnist_calib")), "eval": str(fixture_data("mnist_test"))}
    data.update(changes)
    path.write_text(yaml.safe_dump(data))
    return path


def _env(cache: Path, tmp: Path) -> dict:
    return {"EDGEOPT_CACHE_DIR": str(cache), "EDGEOPT_DATA_DIR": str(tmp / "data")}


# --------------------------------------------------------------------------- fast: the recipe file


def test_unknown_key_exits_3_with_did_you_mean(cli, tmp_path):
    bad = _recipe(tmp_path / "edgeopt.yaml")
    bad.write_text(bad.read_text().replace("max_artifact_kb", "max_artefact_kb"))
    r = cli("pipeline", "run", str(bad), "--json", env=_env(tmp_path / "cache", tmp_path))
    assert r.returncode == 3, r.stderr
    err = json.loads(r.stdout)["error"]
    assert "gates.max_artefact_kb" in err["message"] and err["hint"] == "did you mean 'max_artifact_kb'?"
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_unknown_target_key_and_duplicate_names(tmp_path):
    from edgeopt.errors import BadInputError
    from edgeopt.pipeline.recipe import load_pipeline_recipe

    p = _recipe(tmp_path / "a.yaml", targets=[{"name": "a", "precison": "int8"}])
    with pytest.raises(BadInputError, match=r"targets\[0\]\.precison") as e:
        load_pipeline_recipe(p)
    assert e.value.hint == "did you mean 'precision'?"
    p = _recipe(tmp_path / "b.yaml", targets=[{"name": "a"}, {"name": "a"}])
    with pytest.raises(BadInputError, match="unique"):
        load_pipeline_recipe(p)


def test_paths_resolve_relative_to_the_recipe():
    from edgeopt.pipeline.recipe import load_pipeline_recipe

    lr = load_pipeline_recipe(EXAMPLE)
    assert lr.resolve(lr.recipe.model.path).resolve() == fixture_model("mnist_cnn").resolve()
    assert lr.resolve(lr.recipe.data.eval).is_file()


def test_tarball_is_reproducible_and_content_hash_ignores_timings(tmp_path):
    from edgeopt.pipeline.dist import content_hash, write_tarball

    art = tmp_path / "art"
    art.mkdir()
    (art / "model.onnx").write_bytes(b"weights")
    (art / "manifest.json").write_text("{}")
    a = write_tarball(art, tmp_path / "a.tar.gz", "t")
    (art / "model.onnx").touch()  # a new mtime must not change the bytes
    b = write_tarball(art, tmp_path / "b.tar.gz", "t")
    assert a["sha256"] == b["sha256"]
    names = tarfile.open(tmp_path / "a.tar.gz").getnames()
    assert "t/model.onnx" in names and "t/edgeopt_runtime/runners/base.py" in names
    m = {"created": "x", "stages": [{"name": "n", "seconds": 1.0, "report": {"slim_seconds": 2}}], "files": {"m": "1"}}
    m2 = {"created": "y", "stages": [{"name": "n", "seconds": 3.0, "report": {"slim_seconds": 5}}], "files": {"m": "1"}}
    assert content_hash(m) == content_hash(m2)
    assert content_hash(m) != content_hash({**m, "files": {"m": "2"}})


# --------------------------------------------------------------------------- real builds


@pytest.fixture(scope="module")
def example_runs(tmp_path_factory):
    """The examples' recipe built twice with one cache (second run: all hits), and once more clean."""
    from tests.conftest import run_cli

    tmp = tmp_path_factory.mktemp("pipeline")
    cache = tmp / "cache"
    runs = []
    for i in (1, 2):
        r = run_cli("pipeline", "run", str(EXAMPLE), "--bench", "local", "--output", str(tmp / f"dist{i}"), "--json",
                    env=_env(cache, tmp))
        assert r.returncode == 0, r.stderr[-2000:]
        runs.append(json.loads(r.stdout))
    r = run_cli("pipeline", "run", str(EXAMPLE), "--bench", "none", "--output", str(tmp / "dist3"), "--json",
                env=_env(tmp / "cache-clean", tmp))
    assert r.returncode == 0, r.stderr[-2000:]
    runs.append(json.loads(r.stdout))
    return {"tmp": tmp, "cache": cache, "runs": runs}


@pytest.mark.slow
@pytest.mark.openvino
def test_examples_recipe_builds_two_targets_into_dist(example_runs):
    first = example_runs["runs"][0]
    dist = Path(first["output"])
    summary = json.loads((dist / "summary.json").read_text())
    assert summary["ok"] is True
    by_name = {t["name"]: t for t in summary["targets"]}
    assert set(by_name) == {"host-ort-int8", "host-ov-int8"}
    assert by_name["host-ort-int8"]["backend"] == "onnxruntime" and by_name["host-ov-int8"]["backend"] == "openvino"
    for name, t in by_name.items():
        assert t["status"] == "ok" and t["precision"] == "int8"
        assert (dist / name / "manifest.json").is_file()
        assert t["validation"]["data_source"] == "eval" and t["validation"]["accuracy_drop"] <= 1.0
        assert t["bench"]["p99_ms"] > 0 and t["bench"]["runs"] >= 30
        assert {g["gate"] for g in t["gates"]} == {"max_accuracy_drop", "max_p99_latency_ms", "max_artifact_kb",
                                                  "max_ram_mb"}
        assert all(g["passed"] for g in t["gates"])
        assert next(g for g in t["gates"] if g["gate"] == "max_p99_latency_ms")["source"].startswith("measured")
        tar = tarfile.open(dist / t["tarball"]["path"])
        names = tar.getnames()
        assert f"{name}/manifest.json" in names and f"{name}/edgeopt_runtime/__main__.py" in names
        assert t["determinism"]["deterministic"] is True
    assert summary["report"] == "report.html" and (dist / "report.html").stat().st_size > 1000
    from edgeopt.artifact import load_artifact

    load_artifact(dist / "host-ov-int8")  # every listed file present with its sha256


@pytest.mark.slow
@pytest.mark.openvino
def test_second_run_hits_the_cache(example_runs):
    first, second = example_runs["runs"][0], example_runs["runs"][1]
    assert [t["cached"] for t in first["targets"]] == [False, False]
    assert [t["cached"] for t in second["targets"]] == [True, True]
    for a, b in zip(first["targets"], second["targets"], strict=True):
        assert a["content_hash"] == b["content_hash"] and a["tarball"]["sha256"] == b["tarball"]["sha256"]


@pytest.mark.slow
@pytest.mark.openvino
def test_clean_builds_give_byte_identical_model_files(example_runs):
    d1, d3 = Path(example_runs["runs"][0]["output"]), Path(example_runs["runs"][2]["output"])
    assert [t["cached"] for t in example_runs["runs"][2]["targets"]] == [False, False]
    for name, files in (("host-ort-int8", ["model.onnx"]), ("host-ov-int8", ["model.xml", "model.bin"])):
        for f in files:
            assert (d1 / name / f).read_bytes() == (d3 / name / f).read_bytes(), f"{name}/{f} differs"
    hashes = [{t["name"]: t["content_hash"] for t in r["targets"]} for r in (example_runs["runs"][0],
                                                                            example_runs["runs"][2])]
    assert hashes[0] == hashes[1]


@pytest.mark.slow
@pytest.mark.openvino
def test_failing_gate_exits_5_naming_target_and_figure(cli, example_runs, tmp_path):
    recipe = _recipe(tmp_path / "edgeopt.yaml", gates={"max_artifact_kb": 1})
    out = tmp_path / "dist"
    r = cli("pipeline", "run", str(recipe), "--bench", "none", "--output", str(out),
            env=_env(example_runs["cache"], tmp_path))
    assert r.returncode == 5, r.stderr[-2000:]
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("edgeopt: error: gate failed: target 'host-ort-int8': artifact_kb")
    assert "> 1 KiB" in line and "host-ov-int8" in line
    summary = json.loads((out / "summary.json").read_text())
    assert [t["status"] for t in summary["targets"]] == ["gate_failed", "gate_failed"]
    assert not (out / "host-ort-int8").exists() and not (out / "host-ort-int8.tar.gz").exists()


@pytest.mark.slow
@pytest.mark.openvino
def test_one_target_failing_to_build_does_not_stop_the_others(cli, example_runs, tmp_path):
    targets = [{"name": "bad", "profile": "nosuchdevice"},
               {"name": "host-ort-int8", "profile": "host", "backend": "onnxruntime", "precision": "int8"}]
    recipe = _recipe(tmp_path / "edgeopt.yaml", targets=targets)
    r = cli("pipeline", "run", str(recipe), "--bench", "none", "--output", str(tmp_path / "dist"), "--json",
            env=_env(example_runs["cache"], tmp_path))
    assert r.returncode == 3, r.stderr[-2000:]
    summary = json.loads(r.stdout)["error"]["details"]["summary"]
    status = {t["name"]: t["status"] for t in summary["targets"]}
    assert status == {"bad": "build_failed", "host-ort-int8": "ok"}
    assert "nosuchdevice" in next(t["error"] for t in summary["targets"] if t["name"] == "bad")
    assert (tmp_path / "dist" / "host-ort-int8.tar.gz").is_file()


@pytest.mark.slow
def test_init_writes_a_recipe_that_run_accepts(cli, tmp_path):
    model = shutil.copy(fixture_model("digits_cnn"), tmp_path / "digits.onnx")
    r = cli("pipeline", "init", str(model), "-o", str(tmp_path / "edgeopt.yaml"), "--calib",
            str(fixture_data("digits_calib")), "--eval", str(fixture_data("digits_test")), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["inputs"] == {"input": [1, 1, 8, 8]}
    text = (tmp_path / "edgeopt.yaml").read_text()
    assert "input: [1, 1, 8, 8]" in text and text.count("#") > 10  # commented
    r = cli("pipeline", "run", str(tmp_path / "edgeopt.yaml"), "--bench", "none", "--json",
            env=_env(tmp_path / "cache", tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert out["targets"][0]["status"] == "ok" and (tmp_path / "dist" / "summary.json").is_file()


def test_examples_call_the_recipe():
    wf = yaml.safe_load((REPO / "examples" / "github-actions.yml").read_text())
    steps = [s.get("run", "") for s in wf["jobs"]["build-models"]["steps"]]
    assert any("edgeopt pipeline run edgeopt.yaml" in s for s in steps)
    mk = (REPO / "examples" / "firmware.mk").read_text()
    assert "$(EDGEOPT) pipeline run $(EDGEOPT_RECIPE)" in mk


@pytest.mark.slow
@pytest.mark.openvino
def test_makefile_snippet_runs_the_examples_recipe(tmp_path, example_runs):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    import sys

    r = subprocess.run(["make", "-f", str(REPO / "examples" / "firmware.mk"), "models-check",
                        f"EDGEOPT={sys.executable} -m edgeopt", f"EDGEOPT_RECIPE={EXAMPLE}",
                        f"EDGEOPT_DIST={tmp_path / 'dist'}"], capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, **_env(example_runs["cache"], tmp_path)}, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((tmp_path / "dist" / "summary.json").read_text())["ok"] is True


def test_init_without_data_loads_with_the_accuracy_gate_commented(tmp_path):
    from edgeopt.pipeline.init import init_recipe
    from edgeopt.pipeline.recipe import load_pipeline_recipe

    res = init_recipe(fixture_model("mnist_cnn"), tmp_path / "edgeopt.yaml")
    lr = load_pipeline_recipe(res["recipe"])
    assert lr.recipe.data.calib is None and lr.recipe.gates.max_accuracy_drop is None
    assert lr.resolve(lr.recipe.model.path).resolve() == fixture_model("mnist_cnn").resolve()
    assert lr.recipe.model.inputs == {"input": [1, 1, 28, 28]}
    from edgeopt.errors import OutputExistsError

    with pytest.raises(OutputExistsError):
        init_recipe(fixture_model("mnist_cnn"), tmp_path / "edgeopt.yaml")


@pytest.mark.slow
@pytest.mark.tflite
def test_tflite_target_gets_a_c_array(cli, tmp_path):
    recipe = {"model": {"path": str(fixture_model("digits_cnn")), "inputs": {"input": [1, 1, 8, 8]}},
              "data": {"calib": str(fixture_data("digits_calib")), "eval": str(fixture_data("digits_test"))},
              "gates": {"max_accuracy_drop": 1.0}, "targets": [{"name": "tfl", "backend": "tflite", "precision": "int8"}]}
    (tmp_path / "edgeopt.yaml").write_text(yaml.safe_dump(recipe))
    r = cli("pipeline", "run", str(tmp_path / "edgeopt.yaml"), "--bench", "none", "--json",
            env=_env(tmp_path / "cache", tmp_path))
    assert r.returncode == 0, r.stderr[-2000:]
    t = json.loads(r.stdout)["targets"][0]
    c_dir = tmp_path / "dist" / t["c_array"]["dir"]
    assert "g_tfl_model_data" in (c_dir / "model_data.c").read_text()
    assert t["c_array"]["bytes"] == (tmp_path / "dist" / "tfl" / "model.tflite").stat().st_size
    assert "tfl/c_array/model_data.h" in tarfile.open(tmp_path / "dist" / "tfl.tar.gz").getnames()


@pytest.mark.slow
@pytest.mark.openvino
def test_clean_builds_give_byte_identical_dist_artifacts_and_tarballs(example_runs):
    """Runs 0 and 2 of the fixture are clean builds (own cache dirs, own output dirs; run 0 also
    benchmarks, which must not touch the artifact): every file of dist/<target>/ and every tarball
    is byte-identical; the durations are in summary.json, not in the artifact."""
    r1, r3 = example_runs["runs"][0], example_runs["runs"][2]
    d1, d3 = Path(r1["output"]), Path(r3["output"])
    assert [t["cached"] for t in r3["targets"]] == [False, False] and r1["cache_dir"] != r3["cache_dir"]
    for t1, t3 in zip(r1["targets"], r3["targets"], strict=True):
        name = t1["name"]
        files = sorted(p.relative_to(d1 / name).as_posix() for p in (d1 / name).rglob("*") if p.is_file())
        assert "build.json" not in files and "manifest.json" in files
        assert files == sorted(p.relative_to(d3 / name).as_posix() for p in (d3 / name).rglob("*") if p.is_file())
        for f in files:
            assert (d1 / name / f).read_bytes() == (d3 / name / f).read_bytes(), f"{name}/{f} differs"
        assert (d1 / t1["tarball"]["path"]).read_bytes() == (d3 / t3["tarball"]["path"]).read_bytes()
        assert t1["tarball"]["sha256"] == t3["tarball"]["sha256"]
        manifest = json.loads((d1 / name / "manifest.json").read_text())
        assert manifest["created"] == "1970-01-01T00:00:00+00:00"  # SOURCE_DATE_EPOCH defaults to 0
        assert manifest["determinism"]["deterministic"] is True
        assert t1["build_facts"]["timings"]["stages"][0]["seconds"] >= 0
