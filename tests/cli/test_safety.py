"""Nothing lost: what --force may replace, hashes checked before a measurement,
re-inferred shapes after --input-shape, and the one JSON object under Ctrl-C."""

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


@pytest.mark.slow
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


# --- 13.5: --input-shape re-infers every shape, or refuses --------------------------------------------

def _analyze_flops(cli, model, *shape_args):
    r = cli("analyze", str(model), *shape_args, "--json")
    assert r.returncode == 0, r.stderr
    a = json.loads(r.stdout)["analysis"]
    return a["inputs"][0]["shape"], a["totals"]["flops"]


@pytest.mark.slow
def test_input_shape_override_changes_the_flops(cli, mnist_model):
    shape0, f28 = _analyze_flops(cli, mnist_model)
    assert shape0 == [1, 1, 28, 28]
    assert _analyze_flops(cli, mnist_model, "--input-shape", "input=1x1x28x28")[1] == f28
    shape, f64 = _analyze_flops(cli, mnist_model, "--input-shape", "input=1x1x64x64")
    assert shape == [1, 1, 64, 64]
    assert 4.5 < f64 / f28 < 5.6  # convs scale with the pixels ((64/28)^2 = 5.2); the classifier head does not
    _, f2 = _analyze_flops(cli, mnist_model, "--input-shape", "input=2x1x28x28")
    assert f2 == 2 * f28


def _flatten_gemm_model(path: Path) -> Path:
    """A model tied to its 8x8 input: Conv -> Flatten -> Gemm with a 128-wide weight."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((2, 1, 3, 3), np.float32), "w")
    g = numpy_helper.from_array(np.ones((128, 4), np.float32), "g")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Flatten", ["c"], ["f"]), helper.make_node("Gemm", ["f", "g"], ["y"])]
    graph = helper.make_graph(nodes, "tied", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w, g])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model = onnx.shape_inference.infer_shapes(model)  # with value_info for the 8x8 shape, like an exporter's
    onnx.save(model, path)
    return path


@pytest.mark.slow
def test_input_shape_a_graph_cannot_take_is_refused_naming_the_dims(cli, tmp_path):
    model = _flatten_gemm_model(tmp_path / "tied.onnx")
    _, f8 = _analyze_flops(cli, model, "--input-shape", "x=1x1x8x8")
    _, f8b = _analyze_flops(cli, model, "--input-shape", "x=3x1x8x8")  # the batch dim works
    assert f8b == 3 * f8
    for cmd in (["analyze", str(model)], ["convert", str(model), "--profile", "host", "-o", str(tmp_path / "o")]):
        r = cli(*cmd, "--input-shape", "x=1x1x16x16", "--json")
        assert r.returncode == 3, r.stderr
        msg = json.loads(r.stdout)["error"]["message"]
        assert "changes the static dims (x 1x1x8x8 -> 1x1x16x16)" in msg and "does not work at the new shape" in msg
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tied.onnx"]


def test_missing_or_short_external_weights_are_named(cli, tmp_path, mnist_model):
    import onnx

    m = onnx.load(str(mnist_model))
    onnx.save(m, tmp_path / "model.onnx", save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx.data", size_threshold=0)
    r = cli("analyze", str(tmp_path / "model.onnx"), "--json")
    assert r.returncode == 0, r.stderr  # with its weights beside it, it loads
    data = tmp_path / "model.onnx.data"
    data.write_bytes(data.read_bytes()[:100])
    r = cli("analyze", str(tmp_path / "model.onnx"), "--json")
    assert r.returncode == 3 and "external weights (model.onnx.data) could not be read" in r.stdout, r.stdout
    data.unlink()
    for args in (["analyze"], ["convert", "--profile", "host", "-o", str(tmp_path / "out")]):
        r = cli(args[0], str(tmp_path / "model.onnx"), *args[1:], "--json")
        assert r.returncode == 3
        msg = json.loads(r.stdout)["error"]["message"]
        assert "keeps its weights in 'model.onnx.data' (ONNX external data)" in msg and "is missing" in msg
        assert "truncated or not ONNX" not in r.stdout


# --- 13.6: Ctrl-C keeps the JSON promise ---------------------------------------------------------------

def test_sigint_during_convert_json_prints_one_object_and_leaves_nothing(tmp_path, mnist_model):
    import os
    import signal
    import subprocess
    import sys
    import time

    p = subprocess.Popen([sys.executable, "-m", "edgeopt", "convert", str(mnist_model), "--profile", "host",
                          "--backend", "onnxruntime", "--precision", "int8", "-o", "art", "--json"],
                         cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob("art.tmp-*")) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)  # the conversion has started writing its temporary artifact
    assert p.poll() is None, "the conversion finished before it could be interrupted"
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err
    assert out.count("\n") == 1
    payload = json.loads(out)
    assert payload["ok"] is False and payload["error"]["kind"] == "interrupted"
    assert err.strip().endswith("edgeopt: error: interrupted") and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # neither art/ nor its temporary directory


# --- 13.7: library chatter only with --verbose -------------------------------------------------------

@pytest.mark.slow
@pytest.mark.openvino
def test_library_log_lines_only_with_verbose(cli, tmp_path, mnist_model):
    args = ["convert", str(mnist_model), "--profile", "host", "--backend", "openvino", "--precision", "int8"]
    quiet = cli(*args, "-o", str(tmp_path / "a"), "--json")
    assert quiet.returncode == 0, quiet.stderr
    lines = [ln for ln in quiet.stderr.splitlines() if ln.strip()]
    assert lines and all(ln.startswith(("warning:", "edgeopt:")) for ln in lines), lines  # edgeopt's own only
    loud = cli("--verbose", *args, "-o", str(tmp_path / "b"), "--json")
    assert loud.returncode == 0 and "Statistics collection" in loud.stderr  # NNCF's own progress lines
    assert json.loads(quiet.stdout)["ok"] and json.loads(loud.stdout)["ok"]


def test_error_line_stands_alone_without_verbose(cli, tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07" + b"\xff" * 40)
    r = cli("analyze", str(bad))
    assert r.returncode == 3 and r.stderr.count("\n") == 1 and r.stderr.startswith("edgeopt: error: ")


def test_hints_fit_the_failure(cli, tmp_path, mnist_model):
    """An unreadable calibration file names the data, not the model; a binary recipe is not UTF-8 text."""
    bad = tmp_path / "calib.npz"
    bad.write_bytes(b"PK\x03\x04 not a zip at all")
    for cmd in (["optimize", str(mnist_model), "--time-budget", "1"], ["convert", str(mnist_model), "--profile", "host",
                                                                      "-o", str(tmp_path / "o")]):
        r = cli(*cmd, "--calib", str(bad), "--json")
        assert r.returncode == 3, r.stderr
        err = json.loads(r.stdout)["error"]
        assert "calib" in err["message"] and "analyze" not in err.get("hint", ""), err
    recipe = tmp_path / "r.yaml"
    recipe.write_bytes(b"\xff\xfe\x00binary")
    r = cli("convert", str(mnist_model), "--profile", "host", "--recipe", str(recipe), "-o", str(tmp_path / "o"))
    assert r.returncode == 3 and "is not UTF-8 text" in r.stderr


@pytest.mark.remote
def test_remote_bench_of_a_model_connects_before_converting(cli, remote_env, mnist_model):
    import socket

    from edgeopt.remote.inventory import add_device, make_device

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    add_device(make_device(name="silent", host="127.0.0.1", port=port, profile="host"))
    r = cli("remote-bench", "silent", str(mnist_model), "--json", timeout=120)
    assert r.returncode == 6, r.stderr
    payload = json.loads(r.stdout)
    text = json.dumps(payload)
    assert "refused" in text.lower() and "connect" in text.lower()
    assert "synthetic" not in r.stderr  # no conversion ran (it warns about its synthetic validation data)


def test_a_custom_domain_op_is_not_told_to_try_another_backend(cli, tmp_path):
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("Weird", ["x"], ["y"], domain="com.example")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)]),
              tmp_path / "custom.onnx")
    r = cli("convert", str(tmp_path / "custom.onnx"), "--profile", "host", "-o", str(tmp_path / "o"), "--json")
    assert r.returncode == 3, r.stderr
    err = json.loads(r.stdout)["error"]
    assert "stage 'normalize' failed" in err["message"] and "com.example:Weird" in err["message"]
    assert "another --backend" not in err["hint"] and "custom-domain" in err["hint"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["custom.onnx"]


# --- the libraries' leftovers go with the run ---------------------------------------------

def _own_tmp(tmp_path) -> dict:
    t = tmp_path / "user-tmp"
    t.mkdir()
    return {"TMPDIR": str(t), "TEMP": str(t), "TMP": str(t)}


@pytest.mark.onnxruntime
@pytest.mark.parametrize(("extra", "code"), [((), 0), (("--min-cosine", "0.999999999"), 5)])
def test_convert_leaves_the_users_temp_dir_empty(cli, tmp_path, proj, mnist_test, extra, code):
    env = _own_tmp(tmp_path)
    r = cli("convert", str(proj / "model.onnx"), "--profile", "host", "--backend", "onnxruntime",
            "--calib", str(proj / "calib.npz"), "--eval", str(mnist_test), "-o", str(tmp_path / "out"), "--json",
            *extra, env=env)
    assert r.returncode == code, r.stderr
    assert list(Path(env["TMPDIR"]).iterdir()) == []  # no .ses (ONNX Runtime's), no work dir


def test_the_runs_temp_dir_goes_on_ctrl_c_and_the_environment_comes_back(tmp_path, monkeypatch):
    import os
    import tempfile

    from edgeopt.run_tmp import run_temp_dir

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    with pytest.raises(KeyboardInterrupt):
        with run_temp_dir() as d:
            assert os.environ["TMPDIR"] == str(d) and tempfile.gettempdir() == str(d) and d.parent == tmp_path
            with run_temp_dir() as inner:  # nested runs share it
                assert inner == d
            (d / "torchinductor_user").mkdir()
            raise KeyboardInterrupt
    assert not d.exists() and list(tmp_path.iterdir()) == []
    assert os.environ["TMPDIR"] == str(tmp_path) and tempfile.tempdir is None


@pytest.mark.tflite
@pytest.mark.slow
def test_a_tflite_conversion_leaves_no_autograph_files(cli, tmp_path, proj, mnist_test):
    env = _own_tmp(tmp_path)
    r = cli("convert", str(proj / "model.onnx"), "--profile", "host", "--backend", "tflite", "--precision", "int8",
            "--calib", str(proj / "calib.npz"), "--eval", str(mnist_test), "-o", str(tmp_path / "out"), env=env)
    assert r.returncode == 0, r.stderr
    assert list(Path(env["TMPDIR"]).iterdir()) == []
