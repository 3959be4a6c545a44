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


# --- 13.3: what is measured is what was converted ---------------------------------------------------

@pytest.fixture
def host_artifact(tmp_path_factory, mnist_model):
    from edgeopt.convert import convert

    base = tmp_path_factory.mktemp("art")
    convert(str(mnist_model), "host", str(base / "clean"), backend="onnxruntime", precision="fp32")

    def copy(name: str) -> Path:
        dst = base / name
        shutil.copytree(base / "clean", dst)
        return dst

    return copy


def test_bench_refuses_a_changed_or_missing_file(cli, host_artifact, tmp_path):
    db = tmp_path / "r.db"
    changed = host_artifact("changed")
    with open(changed / "model.onnx", "ab") as f:
        f.write(b"\0")
    missing = host_artifact("missing")
    (missing / "model.onnx").unlink()
    for art, words in ((changed, "file 'model.onnx' was changed after conversion"),
                       (missing, "file 'model.onnx' is missing")):
        r = cli("bench", str(art), "--runs", "3", "--min-seconds", "0", "--db", str(db), "--json")
        assert r.returncode == 3, r.stderr
        assert words in json.loads(r.stdout)["error"]["message"]
    assert not db.exists() or "changed" not in cli("results", "list", "--db", str(db), "--json").stdout


def test_remote_bench_checks_hashes_before_upload_and_on_the_device(remote_env, tmp_path, host_artifact):
    import sys

    from edgeopt.errors import BadInputError
    from edgeopt.remote import deploy
    from edgeopt.remote.bench import remote_bench
    from edgeopt.remote.inventory import make_device
    from edgeopt.remote.transport import LocalTransport

    dev = make_device(name="here", host="localhost", profile="host", python=sys.executable,
                      work_dir=str(tmp_path / "work"))
    changed = host_artifact("changed-remote")
    (changed / "model.onnx").write_bytes(b"not the model")
    tr = LocalTransport(dev.work_dir)
    with pytest.raises(BadInputError, match="'model.onnx' was changed after conversion"):
        remote_bench(dev, changed, transport=tr, store=False, min_runs=3, min_seconds=0, warmup=1)
    assert sorted(p.name for p in Path(tr.work_dir).glob("run-*")) == []  # nothing was uploaded

    clean = host_artifact("clean-remote")  # now a file changed on the device after upload
    files = deploy.bundle_files(clean)
    run_dir = deploy.new_run_dir()
    deploy.upload(tr, files, run_dir)
    listed = json.loads((clean / "manifest.json").read_text())["files"]
    deploy.verify_uploaded(tr, run_dir, listed)  # as uploaded: passes
    on_device = Path(tr.work_dir) / run_dir / "artifact" / "model.onnx"
    on_device.unlink()
    on_device.write_bytes(b"tampered")
    with pytest.raises(BadInputError, match=r"local: uploaded artifact .*'model.onnx' was changed"):
        deploy.verify_uploaded(tr, run_dir, listed)
    on_device.unlink()
    with pytest.raises(BadInputError, match="'model.onnx' is missing"):
        deploy.verify_uploaded(tr, run_dir, listed)
