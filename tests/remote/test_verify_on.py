"""``edgeopt convert … --verify-on DEVICE``: the artifact runs on the device (through remote-bench's
machinery) on the check samples before it is published; its outputs are compared with this host's run of the
same artifact within a stated tolerance; the result is in the manifest and the report; a mismatch is exit 5
naming the output, with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
MNIST = FIXTURES / "models" / "mnist_cnn.onnx"
MNIST_CALIB = FIXTURES / "data" / "mnist_calib.npz"
MNIST_TEST = FIXTURES / "data" / "mnist_test.npz"


def _one_error_line(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("edgeopt: error: ") and "Traceback" not in r.stderr, r.stderr[-2000:]
    return lines[-1]


def _convert(cli, out: Path, *extra: str):
    return cli("convert", str(MNIST), "--calib", str(MNIST_CALIB), "--eval", str(MNIST_TEST), "-o", str(out),
               "--json", *extra)


# ----------------------------------------------------------------------------- checked before any work


def test_an_unknown_device_is_exit_3_before_any_work(remote_env, cli, tmp_path):
    r = _convert(cli, tmp_path / "out", "--profile", "pi5", "--verify-on", "pi5-emu")
    assert r.returncode == 3
    assert "unknown device 'pi5-emu'" in _one_error_line(r)
    assert json.loads(r.stdout)["error"]["kind"] == "unknown_device"
    assert not (tmp_path / "out").exists() and list(tmp_path.glob("out.tmp-*")) == []


def test_a_stopped_emulated_board_says_how_to_start_it(remote_env, cli, tmp_path):
    """The inventory lists pi5-emu (as `emulate start pi5` leaves it) but no emulator runs: exit 6 at once."""
    from edgeopt.remote.inventory import add_device, make_device

    add_device(make_device(name="pi5-emu", host="127.0.0.1", port=2222, profile="pi5", emulated=True))
    r = _convert(cli, tmp_path / "out", "--profile", "pi5", "--verify-on", "pi5-emu", "--dry-run")
    assert r.returncode == 6
    line = _one_error_line(r)
    assert "the emulated device 'pi5-emu' is not running" in line and "edgeopt emulate start pi5" in line


# ----------------------------------------------------------------------------- the comparison itself


def test_tolerances_are_stated_per_precision():
    from edgeopt.remote.verify import tolerance

    assert tolerance("fp32", 10.0, None)[0] == pytest.approx(1e-3)
    assert tolerance("fp16", 10.0, None)[0] == pytest.approx(0.1)
    tol, rule = tolerance("int8", 10.0, 0.05)
    assert tol == pytest.approx(0.05) and "1 quantization step" in rule
    assert "float output of an int8 artifact" in tolerance("int8", 10.0, None)[1]


def test_compare_names_the_output_that_differs():
    from edgeopt.remote.verify import compare

    host = [{"logits": np.array([[1.0, 2.0]]), "prob": np.array([[0.2, 0.8]])} for _ in range(3)]
    device = {"logits": np.stack([o["logits"] for o in host]), "prob": np.stack([o["prob"] for o in host]) + 1e-3}
    res = compare(host, device, "fp32", {})
    assert res["logits"]["passed"] and res["logits"]["max_abs_diff"] == 0.0
    assert not res["prob"]["passed"] and res["prob"]["max_abs_diff"] == pytest.approx(1e-3)
    res = compare(host, {**device, "logits": device["logits"][:2]}, "fp32", {})
    assert not res["logits"]["passed"] and "shape [2, 1, 2] on the device vs [3, 1, 2] here" in res["logits"]["why"]


def test_an_fp32_output_with_one_element_beyond_the_tolerance_holds_when_the_whole_output_agrees():
    """Figures as measured: MediaPipe pose's FP32 segmentation logits (scale 1738) on the emulated Cortex-A72 had one
    element 0.75 off this host's, 4.3e-4 of the scale, with the whole output 2.5e-5 apart (relative L2): another
    CPU's float kernels. A wrong layout (the map transposed) is far apart and fails."""
    from edgeopt.remote.verify import compare

    rng = np.random.default_rng(1)
    host = [{"mask": rng.normal(0, 300, (1, 64, 64))} for _ in range(4)]
    host[0]["mask"][0, 0, 0] = 1738.0
    board = np.stack([o["mask"] for o in host]) * (1 + rng.normal(0, 1e-5, (4, 1, 64, 64)))
    board[0, 0, 0, 1] += 0.75
    res = compare(host, {"mask": board}, "fp32", {})["mask"]
    assert res["max_abs_diff"] > res["tolerance"] and res["passed"] and res["relative_l2"] < 1e-4, res
    assert "relative L2 difference of at most 0.0001" in res["rule"]
    flipped = np.stack([o["mask"] for o in host]).transpose(0, 1, 3, 2)
    res = compare(host, {"mask": flipped}, "fp32", {})["mask"]
    assert not res["passed"] and res["relative_l2"] > 0.5


def test_integer_outputs_must_be_equal_whatever_the_precision():
    """A class id or an index one off is another answer, not a rounding: no scale-relative tolerance."""
    from edgeopt.remote.verify import compare

    host = [{"ids": np.array([[7000, 3]], np.int64), "score": np.array([[0.5]], np.float32)} for _ in range(2)]
    device = {"ids": np.array([[[7000, 3]], [[7001, 3]]]), "score": np.array([[[0.5]], [[0.5]]])}
    for precision in ("fp32", "fp16", "int8"):
        res = compare(host, device, precision, {})
        assert not res["ids"]["passed"] and res["ids"]["tolerance"] == 0.0 and "integer output" in res["ids"]["rule"]
        assert res["score"]["passed"]
    device["ids"] = np.array([[[7000, 3]], [[7000, 3]]])
    assert compare(host, device, "fp32", {})["ids"]["passed"]


def test_an_int8_output_beyond_the_rounding_tolerance_holds_when_as_accurate_as_here():
    """MiniLM's dynamic INT8 on the emulated pi5 (figures as measured, TFLite): some samples several steps off
    this host's (0.006 where 1e-2 x the scale is 0.002), and the board's error vs FP32 the same as here. A board
    whose output moves away from FP32 fails; without FP32 here the rounding tolerance alone decides."""
    from edgeopt.remote.verify import compare

    rng = np.random.default_rng(0)
    fp32 = [{"embedding": rng.normal(0, 0.05, (1, 384))} for _ in range(8)]
    noise = [rng.normal(0, 0.0025, (1, 384)) for _ in range(8)]
    host = [{"embedding": f["embedding"] + n} for f, n in zip(fp32, noise, strict=True)]
    board = np.stack([o["embedding"] for o in host])
    board[0] = fp32[0]["embedding"] + noise[0][:, ::-1]  # another rounding: as far from FP32, elsewhere
    res = compare(host, {"embedding": board}, "int8", {}, fp32)["embedding"]
    assert res["max_abs_diff"] > res["tolerance"] and res["passed"], res
    e = res["error_vs_fp32"]
    assert e["board"] <= 1.25 * e["here"] and "judged by its error vs FP32" in res["rule"]
    from edgeopt.manifest_types import VerifiedOn  # what convert writes into the manifest: typed, not a crash

    vo = VerifiedOn.model_validate({"device": "pi5-emu", "profile": "pi5", "emulated": True, "samples": 8,
                                    "max_abs_diff": res["max_abs_diff"], "tolerance": res["tolerance"],
                                    "rule": res["rule"], "error_vs_fp32": e, "passed": True,
                                    "outputs": {"embedding": res}})
    assert vo.model_dump()["error_vs_fp32"] == e and vo.error_vs_fp32.board == e["board"]
    assert not compare(host, {"embedding": board}, "int8", {})["embedding"]["passed"]  # no FP32: rounding rule only
    board[0] = fp32[0]["embedding"] * -1  # another function on one sample
    res = compare(host, {"embedding": board}, "int8", {}, fp32)["embedding"]
    assert not res["passed"] and res["error_vs_fp32"]["board"] > 1.25 * res["error_vs_fp32"]["here"]
    fp32_res = compare(host, {"embedding": board}, "fp32", {}, fp32)["embedding"]
    assert not fp32_res["passed"] and not fp32_res.get("error_vs_fp32")  # fp32: never judged by the error vs FP32


@pytest.mark.remote
@pytest.mark.onnxruntime
def test_verify_on_an_emulated_x86_board_is_in_the_manifest(emulated_x86, cli, tmp_path):
    """The whole path on the loopback board (this machine's Python behind a real sshd): fast, no qemu."""
    out = tmp_path / "out"
    r = _convert(cli, out, "--profile", "host", "--backend", "onnxruntime", "--precision", "int8",
                 "--verify-on", "x86-emu")
    assert r.returncode == 0, r.stderr[-3000:]
    vo = json.loads(r.stdout)["verified_on"]
    assert vo["device"] == "x86-emu" and vo["emulated"] is True and vo["passed"] is True and vo["samples"] == 8
    assert vo["max_abs_diff"] <= vo["tolerance"] and list(vo["outputs"]) == ["logits"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["verified_on"] == vo
    # a verification is not a benchmark: nothing goes to the results store
    assert not (Path(emulated_x86["state"]["dir"]).parents[1] / "results.db").exists()


@pytest.mark.remote
@pytest.mark.onnxruntime
def test_a_mismatch_is_exit_5_naming_the_output_and_writes_nothing(emulated_x86, tmp_path, monkeypatch):
    """A board whose runtime disagrees: the runner package shipped to it is a copy whose ONNX Runtime runner
    adds 0.5 to every output (a fake of a board's kernels gone wrong; the host keeps the real runner)."""
    import shutil

    import edgeopt.runtime
    from edgeopt.convert_on_device import convert  # the public convert: it runs --verify-on
    from edgeopt.errors import GateFailedError
    from edgeopt.remote import verify

    runtime = tmp_path / "runtime"
    shutil.copytree(Path(edgeopt.runtime.__file__).parent, runtime, ignore=shutil.ignore_patterns("__pycache__"))
    runner = runtime / "runners" / "onnxruntime.py"
    runner.write_text(runner.read_text() + "\n\n_run = Runner.run\nRunner.run = lambda self, feeds: "
                      "{k: v + 0.5 for k, v in _run(self, feeds).items()}\n")
    monkeypatch.setattr(verify, "RUNTIME_DIR", runtime)
    out = tmp_path / "out"
    with pytest.raises(GateFailedError) as e:
        convert(str(MNIST), "host", str(out), backend="onnxruntime", precision="fp32", eval=MNIST_TEST,
                verify_on="x86-emu")
    assert e.value.exit_code == 5
    assert "--verify-on x86-emu: output 'logits' differs from this host's run: max |diff| 0.5 >" in e.value.message
    assert e.value.details["verified_on"]["passed"] is False
    assert not out.exists() and list(tmp_path.glob("out.tmp-*")) == []


def _board_refusing_openvino(tmp_path, monkeypatch) -> None:
    """The runner package shipped to the board: a copy whose OpenVINO runner raises what OpenVINO's ARM plugin
    raised on Basic Pitch's convolution on the emulated A76 (a fake of the board's kernels; the host keeps the
    real runner)."""
    import shutil

    import edgeopt.runtime
    from edgeopt.remote import verify

    runtime = tmp_path / "runtime"
    shutil.copytree(Path(edgeopt.runtime.__file__).parent, runtime, ignore=shutil.ignore_patterns("__pycache__"))
    runner = runtime / "runners" / "openvino.py"
    runner.write_text(runner.read_text() + "\n\ndef _refuse(self, feeds):\n    raise RuntimeError(\n"
                      "        'Exception from src/inference/src/cpp/infer_request.cpp:224:\\n'\n"
                      "        'Node conv1 of type Convolution Check iFunction failed: ACLCommonExecutor: function is "
                      "not configured')\n\n\nRunner.run = _refuse\n")
    monkeypatch.setattr(verify, "RUNTIME_DIR", runtime)


@pytest.mark.remote
@pytest.mark.openvino
@pytest.mark.onnxruntime
def test_an_artifact_the_board_cannot_run_sends_convert_to_the_next_backend(emulated_x86, tmp_path, monkeypatch):
    """A board whose OpenVINO can't set up one of the artifact's ops ("ACLCommonExecutor: function is not
    configured", :func:`_board_refusing_openvino`): convert --verify-on goes on to the profile's next backend,
    which the board runs, instead of ending at exit 6, and the manifest says why OpenVINO was left."""
    from edgeopt.convert_on_device import convert

    _board_refusing_openvino(tmp_path, monkeypatch)
    warned: list[str] = []
    out = tmp_path / "out"
    res = convert(str(MNIST), "host", str(out), precision="int8", calib=MNIST_CALIB, eval=MNIST_TEST,
                  verify_on="x86-emu", on_warning=warned.append)
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["runtime"]["backend"] == "onnxruntime" and manifest["verified_on"]["passed"] is True
    (left,) = manifest["backend_fallback"]
    assert left["backend"] == "openvino" and left["exit_code"] == 6
    assert "the device's runtime could not run the artifact" in left["reason"]
    assert "ACLCommonExecutor: function is not configured" in left["reason"]
    assert any("trying onnxruntime, the profile's next backend" in w for w in warned)
    assert res.manifest.precision == "int8"


@pytest.mark.remote
@pytest.mark.openvino
@pytest.mark.onnxruntime
@pytest.mark.slow
def test_backend_auto_drops_a_backend_the_board_cannot_run(emulated_x86, tmp_path, monkeypatch):
    """--backend auto with --verify-on: the backend whose artifact the board refuses is dropped with its exit code
    and reason, and the fastest of the others is written, as for a backend that missed its gate."""
    from edgeopt.convert_on_device import convert

    _board_refusing_openvino(tmp_path, monkeypatch)
    out = tmp_path / "out"
    convert(str(MNIST), "host", str(out), backend="auto", precision="int8", calib=MNIST_CALIB, eval=MNIST_TEST,
            verify_on="x86-emu")
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["runtime"]["backend"] != "openvino" and manifest["verified_on"]["passed"] is True
    rows = {r["backend"]: r for r in manifest["backend_search"]}
    assert rows["openvino"]["verdict"] == "dropped" and rows["openvino"]["exit_code"] == 6
    assert "ACLCommonExecutor: function is not configured" in rows["openvino"]["why"]


# ----------------------------------------------------------------------------- the emulated Pi 5 (qemu)


@pytest.mark.remote
@pytest.mark.slow
@pytest.mark.tflite
@pytest.mark.onnxruntime
@pytest.mark.parametrize("backend", ["tflite", "onnxruntime", pytest.param("openvino", marks=pytest.mark.openvino)])
def test_pi5_artifact_verified_on_the_emulated_board(emulated_pi5, cli, tmp_path, backend):
    """The MNIST CNN converted for pi5 (TFLite, ONNX Runtime, and OpenVINO's ARM CPU plugin: the profile's
    backends) and run on the emulated Cortex-A76 (aarch64 Python and the runtime's aarch64 wheel under qemu-user)
    on the 8 check samples, through edgeopt's runner and through the artifact's load.py."""
    out = tmp_path / f"out-{backend}"
    r = _convert(cli, out, "--profile", "pi5", "--backend", backend, "--precision", "int8", "--verify-on", "pi5-emu")
    assert r.returncode == 0, r.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    vo = manifest["verified_on"]
    assert vo["device"] == "pi5-emu" and vo["profile"] == "pi5" and vo["emulated"] is True
    (on_board,) = manifest["consumer_check"]["on_devices"]  # the artifact's load.py under qemu, no edgeopt there
    assert on_board["where"] == "pi5-emu" and on_board["device_arch"] == "aarch64" and on_board["passed"] is True
    assert on_board["samples"] == 8 and on_board["how"].startswith("python load.py on pi5-emu, aarch64, emulated")
    assert vo["device_arch"] == "aarch64" and vo["samples"] == 8 and vo["passed"] is True
    if vo["max_abs_diff"] > vo["tolerance"]:  # an AVX2-only host's INT8 kernels round unlike the A76's: then the
        err = vo["error_vs_fp32"]  # board passes only by being as accurate vs FP32 as this host (the stated rule)
        assert err is not None and err["board"] <= err["allowed"]
    assert vo["max_abs_diff"] >= 0.0


@pytest.mark.remote
@pytest.mark.slow
@pytest.mark.tflite
def test_an_early_exit_artifact_for_pi5_runs_its_cascade_on_the_emulated_board(emulated_pi5, cli_in_process, tmp_path,
                                                                              monkeypatch):
    """pi5's default path with early exits: each LiteRT stage and the cascade run on the emulated Cortex-A76
    through edgeopt's runner (verified_on) and through the artifact's own load.py (consumer_check.on_devices)."""
    pytest.importorskip("torch")
    from fixtures_cascade import timings_by_node_count

    timings_by_node_count(monkeypatch)  # the exits kept depend on the graph and the data, not a loaded host
    out = tmp_path / "ee-pi5"
    r = cli_in_process("convert", str(MNIST), "--profile", "pi5", "--precision", "fp32", "--early-exit", "auto",
                       "--calib", str(MNIST_CALIB), "--eval", str(MNIST_TEST), "--max-accuracy-drop", "2",
                       "--set", "early_exit.epochs=80", "--set", "early_exit.timing_runs=3",
                       "--set", "early_exit.min_gain=-1000", "--verify-on", "pi5-emu", "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["runtime"]["backend"] == "tflite" and (out / "cascade.json").is_file()
    vo = manifest["verified_on"]
    assert vo["device"] == "pi5-emu" and vo["device_arch"] == "aarch64" and vo["passed"] is True
    (on_board,) = manifest["consumer_check"]["on_devices"]
    assert on_board["passed"] is True and on_board["skipped"] is None and on_board["samples"] == vo["samples"]
    assert on_board["applied"]["stages"] == len(json.loads((out / "cascade.json").read_text())["stages"]) >= 2


def test_a_runtime_missing_on_the_board_says_how_convert_gets_it_there(tmp_path, monkeypatch):
    """remote-bench's own hint (``--setup``) names a flag convert doesn't have: --verify-on says what to run."""
    from edgeopt.data import Dataset
    from edgeopt.errors import RemoteError
    from edgeopt.remote import bench, verify
    from edgeopt.remote.inventory import make_device

    def runtime_missing(dev, *a, **k):
        raise RemoteError(f"{dev.name}: the artifact's runtime is not installed for python3 on the device",
                          "rerun with --setup to pip-install it")

    monkeypatch.setattr(bench, "remote_bench", runtime_missing)
    monkeypatch.setattr(verify, "_host_outputs", lambda *a: ([], {}))
    samples = Dataset({"x": np.zeros((1, 2), np.float32)})
    for emulated, says in ((True, "edgeopt emulate start pi5"), (False, "edgeopt remote-bench board ARTIFACT --setup")):
        dev = make_device(name="board", host="10.0.0.2", profile="pi5", emulated=emulated)
        with pytest.raises(RemoteError) as err:
            verify.verify_on(tmp_path, dev, samples, "int8")
        assert says in err.value.hint and "rerun with --setup" not in err.value.hint


def test_the_report_line_says_which_rule_passed_the_board_check():
    """A board check passed by the error-vs-FP32 rule never reads 'max |diff| 0.152 <= tolerance 0.01'."""
    from edgeopt.cli.convert_cmd import _verified_text

    base = {"device": "pi5-emu", "emulated": True, "device_arch": "aarch64", "samples": 8, "tolerance": 0.01}
    assert "max |diff| 0.004 <= tolerance 0.01" in _verified_text({**base, "max_abs_diff": 0.004})
    err = {"here": 0.0512, "board": 0.0636, "allowed": 0.064, "measure": "relative L2 error vs FP32 over every sample"}
    line = _verified_text({**base, "max_abs_diff": 0.152, "error_vs_fp32": err})
    assert "<=" not in line and "beyond the tolerance 0.01" in line and "0.0636 there, 0.0512 here" in line
