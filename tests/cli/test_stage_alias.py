"""The ONNX Q/DQ stage is called ``qdq``; its old name ``quantize`` is still read, at the CLI, from a recipe and
from an artifact written before the rename (``converters.registry.STAGE_ALIASES``): a warning says so once, the same
field given under both names is a usage error (exit 2), and an old manifest is read as written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeopt.errors import ExitCode

pytestmark = pytest.mark.onnxruntime
REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"
DIGITS_CALIB = REPO / "fixtures" / "data" / "digits_calib.npz"
DIGITS_TEST = REPO / "fixtures" / "data" / "digits_test.npz"
RENAMED = "stage 'quantize' is now called 'qdq' (the ONNX Q/DQ stage); read as 'qdq'"


@pytest.fixture
def cli(cli_in_process):
    return cli_in_process


def _convert(cli, out: Path, *args: str):
    return cli("convert", str(DIGITS), "--profile", "host", "--backend", "onnxruntime", "--precision", "int8",
               "--calib", str(DIGITS_CALIB), "-o", str(out), "--json", *args)


def _qdq_config(r) -> dict:
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)["plan"]
    assert [s["name"] for s in plan["stages"]] == ["normalize", "qdq", "onnxruntime"]
    return plan["stages"][1]["config"]


def test_set_with_the_old_stage_name_works_and_warns_once(cli, tmp_path):
    r = _convert(cli, tmp_path / "out", "--set", "quantize.calib_samples=64", "--dry-run")
    assert _qdq_config(r)["calib_samples"] == 64
    assert json.loads(r.stdout)["warnings"].count(RENAMED) == 1
    assert r.stderr.count(RENAMED) == 1  # through the warning channel, as every plan warning
    new = _convert(cli, tmp_path / "out", "--set", "qdq.calib_samples=64", "--dry-run")
    assert _qdq_config(new)["calib_samples"] == 64 and RENAMED not in new.stderr
    assert json.loads(new.stdout)["plan"]["plan_hash"] == json.loads(r.stdout)["plan"]["plan_hash"]  # the same plan


def test_a_recipe_with_the_old_stage_name_works_and_warns(cli, tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("stages:\n  quantize: {calib_samples: 32, bound: {search_fraction: 0.3}}\n")
    r = _convert(cli, tmp_path / "out", "--recipe", str(recipe), "--set", "qdq.pre_process=false", "--dry-run")
    config = _qdq_config(r)  # fields under both names merge when none is given twice
    assert (config["calib_samples"], config["bound"]["search_fraction"], config["pre_process"]) == (32, 0.3, False)
    assert RENAMED in json.loads(r.stdout)["warnings"]


@pytest.mark.parametrize("sets", [("quantize.calib_samples=1", "qdq.calib_samples=2"),
                                  ("qdq.bound.search_fraction=0.2", "quantize.bound.search_fraction=0.4")])
def test_one_field_under_both_names_is_a_usage_error(cli, tmp_path, sets):
    r = _convert(cli, tmp_path / "out", *(a for s in sets for a in ("--set", s)))
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("edgeopt: error:")]
    assert r.returncode == ExitCode.USAGE == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    field = sets[0].split("=")[0].split(".", 1)[1]
    assert f"quantize.{field} and qdq.{field}" in lines[0] and f"give it once, as qdq.{field}" in lines[0]
    assert json.loads(r.stdout)["error"]["exit_code"] == 2 and not (tmp_path / "out").exists()


def test_a_misspelt_old_name_suggests_the_new_one(cli, tmp_path):
    r = _convert(cli, tmp_path / "out", "--set", "quantise.calib_samples=8", "--dry-run")
    assert r.returncode == ExitCode.BAD_INPUT and "did you mean 'qdq'?" in r.stderr, r.stderr


@pytest.mark.slow
def test_a_conversion_with_the_old_name_runs_qdq_and_an_artifact_naming_quantize_is_still_read(cli, tmp_path):
    out = tmp_path / "art"
    r = _convert(cli, out, "--eval", str(DIGITS_TEST), "--set", "quantize.calib_samples=16")
    assert r.returncode == 0, r.stderr
    assert RENAMED in json.loads(r.stdout)["warnings"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert [s["name"] for s in manifest["stages"]] == [s["name"] for s in manifest["plan"]["stages"]] == \
        ["normalize", "qdq", "onnxruntime"]
    assert manifest["stages"][1]["report"]["calibration"]["samples"] == 16
    # the same artifact as written before the rename: its stage and plan name 'quantize', read as written
    old = (out / "manifest.json").read_text().replace('"name": "qdq"', '"name": "quantize"')
    (out / "manifest.json").write_text(old)
    from edgeopt.artifact import load_artifact

    assert [s.name for s in load_artifact(out).stages] == ["normalize", "quantize", "onnxruntime"]
    shown = cli("inspect", str(out))
    assert shown.returncode == 0 and "quantize" in shown.stdout, shown.stderr
    assert (out / "manifest.json").read_text() == old  # reading never rewrites it
