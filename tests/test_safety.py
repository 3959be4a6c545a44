"""Nothing lost: what --force may replace (issue 13.1), hashes checked before a measurement (13.3),
re-inferred shapes after --input-shape (13.5), and the one JSON object under Ctrl-C (13.6)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from edgeopt.errors import OutputExistsError
from edgeopt.outputs import check_output


def _snapshot(d: Path) -> dict[str, bytes]:
    return {p.relative_to(d).as_posix(): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


@pytest.fixture
def proj(tmp_path, mnist_model, mnist_calib):
    """A user's project folder: the model, its calibration data and their notes."""
    p = tmp_path / "proj"
    p.mkdir()
    shutil.copy(mnist_model, p / "model.onnx")
    shutil.copy(mnist_calib, p / "calib.npz")
    (p / "notes.txt").write_text("my notes\n")
    return p


# --- the rule itself, in-process (fast) -------------------------------------------------------------

def test_force_refuses_a_directory_holding_an_input(proj):
    for out in (proj, proj.parent):  # the input's own folder, and a parent of it
        with pytest.raises(OutputExistsError, match="holds this run's input"):
            check_output(out, force=True, inputs=[proj / "model.onnx"])


def test_force_refuses_an_input_named_by_a_relative_path(proj, monkeypatch):
    monkeypatch.chdir(proj.parent)
    with pytest.raises(OutputExistsError, match="holds this run's input 'proj/calib.npz'"):
        check_output("proj/../proj", force=True, inputs=["proj/calib.npz"])


def test_force_refuses_a_folder_of_other_files_and_a_file(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "thesis.tex").write_text("x")
    with pytest.raises(OutputExistsError, match=r"not an edgeopt output and not empty \(thesis.tex\)"):
        check_output(other, force=True)
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(OutputExistsError, match="not a directory edgeopt wrote"):
        check_output(f, force=True)
    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "manifest.json").write_text('{"some": "other tool"}')  # a manifest, but not edgeopt's
    with pytest.raises(OutputExistsError, match="not an edgeopt output"):
        check_output(fake, force=True)


def test_force_refuses_the_current_directory_and_its_parents(tmp_path, monkeypatch):
    work = tmp_path / "empty"
    work.mkdir()
    monkeypatch.chdir(work)
    for out in (".", "..", str(work), "./"):
        with pytest.raises(OutputExistsError, match="current directory"):
            check_output(out, force=True)


def test_force_may_replace_an_empty_dir_or_an_edgeopt_output(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert check_output(empty, force=True) == empty
    art = tmp_path / "art"
    art.mkdir()
    (art / "manifest.json").write_text(json.dumps({"edgeopt_version": "0.1", "files": {}}))
    (art / "model.onnx").write_bytes(b"x")
    assert check_output(art, force=True) == art
    with pytest.raises(OutputExistsError, match="exists"):
        check_output(art, force=False)
    assert check_output(tmp_path / "new" / "deeper", force=False) == tmp_path / "new" / "deeper"


# --- through the real CLI: refused with exit 3 and nothing touched -----------------------------------

def test_cli_convert_force_into_the_inputs_folder_loses_nothing(cli, proj):
    before = _snapshot(proj)
    for out in (str(proj), str(proj.parent)):
        r = cli("convert", str(proj / "model.onnx"), "--profile", "host", "--calib", str(proj / "calib.npz"),
                "-o", out, "--force", "--json")
        assert r.returncode == 3, r.stderr
        err = json.loads(r.stdout)["error"]
        assert err["kind"] == "output_exists" and "holds this run's input" in err["message"]
        assert "Traceback" not in r.stderr
    assert _snapshot(proj) == before
    assert sorted(p.name for p in proj.parent.iterdir()) == ["proj"]  # no temporary directory left


def test_cli_convert_dot_is_one_line_not_an_internal_error(cli, proj):
    r = cli("convert", "model.onnx", "--profile", "host", "-o", ".", "--force", cwd=str(proj))
    assert r.returncode == 3, r.stderr
    assert r.stderr.count("\n") == 1 and "current directory" in r.stderr
    r = cli("convert", str(proj / "model.onnx"), "--profile", "host", "-o", ".", cwd=str(proj.parent))
    assert r.returncode == 3 and "current directory" in r.stderr


def test_cli_convert_force_replaces_its_own_artifact(cli, tmp_path, mnist_model):
    out = tmp_path / "art"
    r = cli("convert", str(mnist_model), "--profile", "host", "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    r = cli("convert", str(mnist_model), "--profile", "host", "-o", str(out), "--json")
    assert r.returncode == 3 and json.loads(r.stdout)["error"]["kind"] == "output_exists"
    r = cli("convert", str(mnist_model), "--profile", "host", "-o", str(out), "--force", "--json")
    assert r.returncode == 0, r.stderr
    assert (out / "manifest.json").is_file()


def test_cli_pipeline_output_over_the_project_is_refused(cli, proj):
    recipe = proj / "edgeopt.yaml"
    recipe.write_text("version: 1\nmodel: {path: model.onnx}\noutput: .\ntargets: [{name: host, profile: host}]\n")
    before = _snapshot(proj)
    r = cli("pipeline", "run", str(recipe), "--bench", "none", "--json")
    assert r.returncode == 3, r.stderr + r.stdout
    assert "holds this run's input" in json.loads(r.stdout)["error"]["message"]
    assert _snapshot(proj) == before
