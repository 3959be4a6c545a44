"""``edgeopt convert`` end to end: artifact contents, atomic writes, bad inputs, gates, inspect."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from fixtures_convert import conv_bn_model, write_profile

from edgeopt.artifact import load_artifact
from edgeopt.convert import convert
from edgeopt.errors import BadInputError, ExitCode, GateFailedError, OutputExistsError, StageError
from edgeopt.validate import Validation

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"


def _leftovers(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(out.name + "."))


def test_fp32_convert_manifest_and_runner(tmp_path, tiny_model, tiny_data, test_profile):
    out = tmp_path / "art"
    r = convert(tiny_model, str(test_profile), out, eval=tiny_data)
    m = load_artifact(out)
    assert m.backend == "onnxruntime" and m.precision == "fp32" and m.profile == "testdev"
    assert set(m.files) == {"model.onnx", "load.py", "load.cc"} and m.runtime.model == "model.onnx"
    assert m.runtime.settings["graph_optimization_level"] == "ORT_ENABLE_ALL"
    assert m.inputs[0].name == "x" and m.inputs[0].shape == [1, 3, 8, 8] and m.inputs[0].layout == "NCHW"
    assert m.outputs[0].name == "logits" and m.outputs[0].shape == [1, 5]
    assert [s.name for s in m.stages] == ["normalize", "onnxruntime"]
    assert m.stages[0].report["batchnorm_after"] == 0 and m.stages[0].seconds >= 0
    assert m.plan_hash == r.plan.hash and len(m.source_model.sha256) == 64
    assert m.versions["onnxruntime"] and m.calibration.samples == 0
    v = m.validation
    assert isinstance(v, Validation) and r.validation == v  # typed, in the manifest and the result alike
    assert v.data_source == "eval" and v.samples == 20 and not v.synthetic
    assert v.cosine_min > 0.9999 and v.accuracy_reference == 100.0 and v.accuracy_drop == 0.0
    assert _leftovers(out) == []

    from edgeopt.runtime.runners import open_runner

    x = np.load(tiny_data)["x"][:1]
    with open_runner(str(out)) as runner:
        got = runner.run({"x": x})["logits"]
    import onnxruntime as ort

    want = ort.InferenceSession(str(tiny_model), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_tampered_artifact_refused(tmp_path, tiny_model, test_profile):
    out = tmp_path / "art"
    convert(tiny_model, str(test_profile), out)
    with open(out / "model.onnx", "ab") as f:
        f.write(b"x")
    with pytest.raises(BadInputError, match="changed after conversion") as e:
        load_artifact(out)
    assert e.value.exit_code == ExitCode.BAD_INPUT


def test_existing_output_refused_then_forced(tmp_path, tiny_model, test_profile):
    out = tmp_path / "art"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="exists") as e:
        convert(tiny_model, str(test_profile), out)
    assert "--force" in e.value.hint and e.value.exit_code == ExitCode.BAD_INPUT
    assert (out / "keep.txt").exists()
    with pytest.raises(OutputExistsError, match="not an edgeopt output"):  # --force never loses a user's file
        convert(tiny_model, str(test_profile), out, force=True)
    assert (out / "keep.txt").read_text() == "mine"
    (out / "keep.txt").unlink()  # an empty directory, or edgeopt's own artifact, may be replaced
    convert(tiny_model, str(test_profile), out, force=True)
    convert(tiny_model, str(test_profile), out, force=True)
    assert (out / "manifest.json").exists()
    assert _leftovers(out) == []


def test_fake_backend_failing_midway_leaves_nothing(tmp_path, tiny_model, test_profile, monkeypatch):
    """Fake: the ORT backend writes a file, then raises; neither OUT nor its tmp dir may remain."""
    from edgeopt.converters.backends.onnxruntime import stage as ort_backend

    def broken(self, model, config, ctx):
        (ctx.artifact_dir / "model.onnx").write_bytes(b"half")
        raise OSError("disk full (fake)")

    monkeypatch.setattr(ort_backend.OnnxRuntimeBackend, "run", broken)
    out = tmp_path / "art"
    with pytest.raises(StageError) as e:
        convert(tiny_model, str(test_profile), out)
    assert "stage 'onnxruntime' failed" in e.value.message and "disk full" in e.value.message
    assert not out.exists() and _leftovers(out) == []


def test_fake_noisy_backend_fails_cosine_gate(tmp_path, tiny_model, test_profile, monkeypatch):
    """Fake: the backend perturbs the weights; the min-cosine gate misses: exit 5, nothing at OUT."""
    import onnx
    from onnx import numpy_helper

    from edgeopt.converters.backends.onnxruntime import stage as ort_backend

    real = ort_backend.OnnxRuntimeBackend.run

    def noisy(self, model, config, ctx):
        proto = onnx.load(str(model.path))
        for init in proto.graph.initializer:
            a = numpy_helper.to_array(init)
            noise = np.random.default_rng(0).normal(size=a.shape).astype(a.dtype)
            init.CopyFrom(numpy_helper.from_array(a + noise, init.name))
        noisy_path = ctx.work_dir / "noisy.onnx"
        onnx.save(proto, str(noisy_path))
        model.path = noisy_path
        return real(self, model, config, ctx)

    monkeypatch.setattr(ort_backend.OnnxRuntimeBackend, "run", noisy)
    out = tmp_path / "art"
    with pytest.raises(GateFailedError) as e:
        convert(tiny_model, str(test_profile), out, min_cosine=0.999)
    assert e.value.exit_code == ExitCode.GATE_FAILED and "cosine" in e.value.message
    assert e.value.details["validation"]["cosine_min"] < 0.999
    assert not out.exists() and _leftovers(out) == []


def test_accuracy_gate_without_labels_exit_5_cli(tmp_path, cli, tiny_model, test_profile):
    out = tmp_path / "art"
    r = cli("convert", str(tiny_model), "--profile", str(test_profile), "-o", str(out), "--max-accuracy-drop", "1",
            "--json")
    assert r.returncode == 5, r.stderr
    err = json.loads(r.stdout)["error"]
    assert err["kind"] == "gate_failed" and "no labels" in err["message"]
    assert "validation" in err["details"] and not out.exists()


def test_bad_calib_cli_exit_3(tmp_path, cli, tiny_model, test_profile):
    bad = tmp_path / "nhwc.npz"
    np.savez(bad, x=np.ones((4, 8, 8, 3), np.float32))
    r = cli("convert", str(tiny_model), "--profile", str(test_profile), "-o", str(tmp_path / "o"), "--calib", str(bad))
    assert r.returncode == 3 and "NHWC" in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and not (tmp_path / "o").exists()


def test_nan_weights_cli_exit_3(tmp_path, cli, test_profile):
    m = conv_bn_model(tmp_path / "nan.onnx", batch=1, nan_weight=True)
    r = cli("convert", str(m), "--profile", str(test_profile), "-o", str(tmp_path / "o"))
    assert r.returncode == 3 and "conv_w" in r.stderr


def test_cli_convert_json_then_inspect(tmp_path, cli, tiny_data):
    m = conv_bn_model(tmp_path / "dyn.onnx", batch="N")
    prof = write_profile(tmp_path)
    out = tmp_path / "art"
    r = cli("convert", str(m), "--profile", str(prof), "-o", str(out), "--input-shape", "x=1x3x8x8",
            "--calib", str(tiny_data), "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["ok"] and s["artifact"] == str(out) and s["validation"]["data_source"] == "calib"
    assert s["validation"]["top1_agreement"] == 1.0
    r = cli("inspect", str(out), "--json")
    assert r.returncode == 0, r.stderr
    man = json.loads(r.stdout)["manifest"]
    assert man["inputs"][0]["shape"] == [1, 3, 8, 8] and man["plan_hash"] == s["plan_hash"]


def test_int8_without_calib_is_labelled_synthetic(tmp_path, tiny_model, test_profile):
    warned = []
    try:
        r = convert(tiny_model, str(test_profile), tmp_path / "art", precision="int8", on_warning=warned.append)
    except BadInputError as e:
        pytest.skip(f"qdq stage cannot run here yet: {e.message}")
    assert r.manifest.calibration.synthetic is True and r.manifest.precision == "int8"
    assert any("SYNTHETIC" in w for w in warned)


@pytest.mark.skipif(not DIGITS.exists(), reason="digits fixture not made")
def test_digits_fp32_real_data(tmp_path, test_profile):
    data = REPO / "fixtures" / "data"
    r = convert(DIGITS, str(test_profile), tmp_path / "art", calib=data / "digits_calib.npz",
                eval=data / "digits_test.npz", max_accuracy_drop=0.0)
    v = r.validation
    assert v.samples == 540 and v.accuracy_drop == 0.0 and v.accuracy > 95.0


@pytest.mark.slow
@pytest.mark.skipif(not DIGITS.exists(), reason="digits fixture not made")
def test_int8_digits_min_cosine_gate_exit_5(tmp_path, cli, test_profile):
    out = tmp_path / "art"
    r = cli("convert", str(DIGITS), "--profile", str(test_profile), "-o", str(out), "--precision", "int8",
            "--calib", str(REPO / "fixtures" / "data" / "digits_calib.npz"), "--min-cosine", "0.99999", "--json")
    if r.returncode == 2 and "not available" in r.stderr:
        pytest.skip("qdq stage not in this checkout")
    assert r.returncode == 5, r.stderr
    assert json.loads(r.stdout)["error"]["kind"] == "gate_failed"
    assert not out.exists() and _leftovers(out) == []


@pytest.mark.slow
def test_from_torch_tiny_module(tmp_path, test_profile, monkeypatch):
    torch = pytest.importorskip("torch")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "tinynet.py").write_text(
        "import torch\n"
        "def make():\n"
        "    return torch.nn.Sequential(torch.nn.Conv1d(1, 4, 3), torch.nn.BatchNorm1d(4), torch.nn.ReLU(),\n"
        "                               torch.nn.Flatten(), torch.nn.Linear(4 * 14, 3))\n")
    monkeypatch.syspath_prepend(str(pkg))
    import tinynet

    torch.manual_seed(0)
    w = tmp_path / "w.pt"
    torch.save(tinynet.make().state_dict(), w)
    r = convert(None, str(test_profile), tmp_path / "art", from_torch="tinynet:make", weights=w,
                input_shapes=["input=1x1x16"])
    m = r.manifest
    assert m.source_model.from_torch == "tinynet:make" and m.versions["torch"]
    assert m.inputs[0].name == "input" and m.validation.cosine_min > 0.9999


def test_from_torch_simulated_missing_torch_exit_4(tmp_path, cli, simulate_missing, test_profile):
    r = cli("convert", "--from-torch", "fixtures.crepe:tiny", "--input-shape", "input=1x1024", "--profile",
            str(test_profile), "-o", str(tmp_path / "o"), env=simulate_missing("torch"))
    assert r.returncode == 4, r.stderr
    assert "torch" in r.stderr


@pytest.mark.slow
@pytest.mark.realmodels
def test_crepe_tiny_from_torch(tmp_path, test_profile):
    pytest.importorskip("torch")
    try:
        from fixtures.real_models import real_model

        weights = real_model("crepe_tiny_weights")
    except Exception as e:  # noqa: BLE001 - the fixture or its package is absent
        pytest.skip(f"CREPE tiny weights not available: {e}")
    r = convert(None, str(test_profile), tmp_path / "art", from_torch="fixtures.crepe:tiny", weights=weights,
                input_shapes=["input=1x1024"])
    m = r.manifest
    assert m.outputs[0].shape == [1, 360]
    report = m.stages[0].report  # CREPE is Conv -> ReLU -> BN: BN after a ReLU cannot fold into the conv
    assert report["batchnorm_before"] == 6 and report["batchnorm_after"] <= 6
    assert m.validation.cosine_min > 0.9999


def test_same_inputs_give_a_byte_identical_manifest_and_timings_go_to_build_json(tmp_path, tiny_model, tiny_data,
                                                                                   test_profile, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    a, b = tmp_path / "a", tmp_path / "b"
    convert(tiny_model, str(test_profile), a, eval=tiny_data)
    convert(tiny_model, str(test_profile), b, eval=tiny_data)
    assert (a / "manifest.json").read_bytes() == (b / "manifest.json").read_bytes()
    assert (a / "model.onnx").read_bytes() == (b / "model.onnx").read_bytes()
    raw = json.loads((a / "manifest.json").read_text())
    assert raw["created"] == "2023-11-14T22:13:20+00:00" and raw["build_facts"] == "build.json"
    assert raw["determinism"]["deterministic"] is True and raw["determinism"]["why"]
    assert "seconds" not in json.dumps(raw["stages"])  # durations live in build.json
    assert "build.json" not in raw["files"] and set(raw["files"]) == {"model.onnx", "load.py", "load.cc"}
    facts = json.loads((a / "build.json").read_text())
    assert facts["host"] and facts["timings"]["stages"][0]["seconds"] >= 0
    m = load_artifact(a)  # build.json's timings merged back in
    assert m.stages[0].seconds == facts["timings"]["stages"][0]["seconds"]
    (a / "build.json").unlink()  # informative only: the artifact still loads without it
    assert load_artifact(a).stages[0].seconds is None


def test_bad_source_date_epoch_is_a_one_line_error(tmp_path, tiny_model, test_profile, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "yesterday")
    with pytest.raises(BadInputError, match="SOURCE_DATE_EPOCH"):
        convert(tiny_model, str(test_profile), tmp_path / "a")
    assert not (tmp_path / "a").exists()


def test_inspect_shows_durations_from_build_json(cli, tmp_path, tiny_model, test_profile):
    out = tmp_path / "art"
    convert(tiny_model, str(test_profile), out)
    r = cli("inspect", str(out))
    assert r.returncode == 0, r.stderr
    assert "stage normalize: " in r.stdout and " s" in r.stdout and "duration not recorded" not in r.stdout
    assert "deterministic: True" in r.stdout
    j = json.loads(cli("inspect", str(out), "--json").stdout)
    assert j["build"]["timings"]["stages"][0]["seconds"] == j["manifest"]["stages"][0]["seconds"]
