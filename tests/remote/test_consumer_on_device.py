"""The consumer check on the ``--verify-on`` device: the artifact's ``load.py`` run there with only the artifact's
files (edgeopt not importable), its outputs compared with edgeopt's runner on this host; the manifest's
``consumer_check.on_devices`` holds the entry, ``edgeopt inspect`` shows it; a difference is exit 5 naming the
device and the output, with nothing written."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
MNIST = FIXTURES / "models" / "mnist_cnn.onnx"
MNIST_CALIB = FIXTURES / "data" / "mnist_calib.npz"
MNIST_TEST = FIXTURES / "data" / "mnist_test.npz"


@pytest.mark.remote
@pytest.mark.onnxruntime
def test_load_py_runs_on_the_loopback_board_and_inspect_shows_it(emulated_x86, cli, tmp_path):
    out = tmp_path / "out"
    r = cli("convert", str(MNIST), "--calib", str(MNIST_CALIB), "--eval", str(MNIST_TEST), "-o", str(out), "--json",
            "--profile", "host", "--backend", "onnxruntime", "--precision", "int8", "--verify-on", "x86-emu")
    assert r.returncode == 0, r.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert "consumer_check" not in manifest["verified_on"]  # the entry lives in consumer_check.on_devices
    (entry,) = manifest["consumer_check"]["on_devices"]
    assert entry["where"] == "x86-emu" and entry["emulated"] is True and entry["passed"] is True
    assert entry["samples"] == 8 and entry["worst_output"] == "logits" and entry["skipped"] is None
    assert entry["max_abs_diff"] <= entry["tolerance"]
    assert entry["how"].startswith("python load.py on x86-emu") and "edgeopt not importable" in entry["how"]
    assert entry["runtime"].startswith("onnxruntime ") and entry["applied"]["providers"] == ["CPUExecutionProvider"]
    shown = cli("inspect", str(out))
    assert shown.returncode == 0, shown.stderr[-2000:]
    line = next(ln for ln in shown.stdout.splitlines() if "on x86-emu" in ln)
    assert "passed" in line and "python load.py on x86-emu" in line and "max |diff| vs the runner here" in line


@pytest.mark.remote
@pytest.mark.onnxruntime
def test_load_py_that_differs_on_the_board_is_exit_5_naming_the_board(emulated_x86, tmp_path, monkeypatch):
    """The board's load.py run made to add 0.5 to every output it saves (a fake of a device runtime that computes
    otherwise under the plain API; edgeopt's runner there is untouched and agrees)."""
    from edgeopt.convert_on_device import convert
    from edgeopt.errors import GateFailedError
    from edgeopt.remote import consumer

    shifted = consumer.GUARD.replace(
        "runpy.run_path", "import numpy\n_save = numpy.savez\nnumpy.savez = lambda f, **a: _save(f, **{k: v + 0.5 "
        "for k, v in a.items()})\nrunpy.run_path")
    monkeypatch.setattr(consumer, "GUARD", shifted)
    out = tmp_path / "out"
    with pytest.raises(GateFailedError) as e:
        convert(str(MNIST), "host", str(out), backend="onnxruntime", precision="fp32", eval=MNIST_TEST,
                verify_on="x86-emu")
    assert e.value.exit_code == 5
    assert e.value.message.startswith("consumer check on x86-emu: load.py output 'logits' differs from edgeopt's "
                                      "runner on this host: max |diff| 0.5 >")
    assert e.value.details["consumer_check"]["passed"] is False
    assert not out.exists() and list(tmp_path.glob("out.tmp-*")) == []


def test_the_guard_makes_edgeopt_unimportable_for_load_py(tmp_path):
    """On the loopback board the device's Python is this one, where edgeopt is installed: load.py still may not
    use it. A script importing edgeopt fails under the guard; one using numpy alone runs, with its own argv."""
    from edgeopt.remote.consumer import GUARD

    bad = tmp_path / "bad.py"
    bad.write_text("import edgeopt.runtime\n")
    done = subprocess.run([sys.executable, "-c", GUARD, str(bad)], capture_output=True, text=True, check=False)
    assert done.returncode != 0 and "No module named 'edgeopt.runtime'; 'edgeopt' is not a package" in done.stderr
    good = tmp_path / "good.py"
    good.write_text("import sys, numpy\nprint(sys.argv[1:], __name__)\n")
    done = subprocess.run([sys.executable, "-c", GUARD, str(good), "--x", "1"], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0 and done.stdout.strip() == "['--x', '1'] __main__", done.stderr


def test_a_failing_load_py_on_the_board_is_exit_5_and_an_edgeopt_import_is_named():
    from edgeopt.errors import GateFailedError, RemoteError
    from edgeopt.remote.consumer import _check_exit
    from edgeopt.remote.inventory import make_device
    from edgeopt.remote.transport import RunResult
    from edgeopt.remote.verify import install_hint

    dev = make_device(name="board", host="10.0.0.2", profile="pi5")
    err = "ModuleNotFoundError: import of edgeopt halted; None in sys.modules"
    with pytest.raises(GateFailedError) as e:
        _check_exit(dev, RunResult(1, "", f"Traceback ...\n{err}\n"), ["python3"])
    assert e.value.exit_code == 5 and "it imports edgeopt code" in e.value.message
    err = "ModuleNotFoundError: No module named 'edgeopt.runtime'; 'edgeopt' is not a package"
    with pytest.raises(GateFailedError) as e:
        _check_exit(dev, RunResult(1, "", f"{err}\n"), ["python3"])
    assert "it imports edgeopt code" in e.value.message
    with pytest.raises(RemoteError) as e:  # the runtime itself missing on the board: how to install it
        _check_exit(dev, RunResult(1, "", "ModuleNotFoundError: No module named 'onnxruntime'\n"), ["python3"],
                    install_hint(dev))
    assert e.value.exit_code == 6 and "'onnxruntime' is not installed" in e.value.message
    assert "remote-bench board ARTIFACT --setup" in e.value.hint


@pytest.mark.remote
@pytest.mark.onnxruntime
def test_a_staged_early_exit_artifacts_load_py_runs_its_cascade_on_the_board(emulated_x86, tmp_path):
    """The cascade's load.py (each stage opened by ONNX Runtime's own loader) runs on the board with the artifact's
    files only; each sample's answer is compared with edgeopt's cascade runner on this host."""
    from fixtures_cascade import hand_cascade, samples

    from edgeopt.consumer.check import check_as_deployed
    from edgeopt.remote.inventory import get_device
    from edgeopt.remote.verify import load_py_on_device
    from edgeopt.runtime.runners import open_runner

    art, manifest = hand_cascade(tmp_path / "ee")
    check_as_deployed(art, manifest, samples(16), version="test")  # writes load.py, checks it here
    feeds = [samples(16).feed(i) for i in range(16)]
    with open_runner(str(art), manifest=manifest) as runner:
        host = [runner.run(f) for f in feeds]
        assert 0 < sum(runner.exit_counts[:-1]) < 16  # some samples leave early, some run to the end
    entry = load_py_on_device(get_device("x86-emu"), art, samples(16), host, "fp32", {}, None, device_arch="x86_64")
    assert entry["where"] == "x86-emu" and entry["skipped"] is None and entry["passed"] is True
    assert entry["samples"] == 16 and entry["worst_output"] == "logits" and entry["applied"]["stages"] == 2


def test_the_board_entry_is_shown_even_where_the_host_check_was_skipped():
    """A TVM library built for aarch64 can't load here: the host check says so, the board's entry still shows."""
    from edgeopt.cli.artifact_text import consumer_check_text

    entry = {"where": "pi5-emu", "how": "python load.py on pi5-emu, aarch64, emulated: …", "runtime": "apache-tvm 0.27",
             "samples": 8, "passed": True, "applied": {}, "max_abs_diff": 0.0, "tolerance": 1e-5, "rule": "r"}
    lines = consumer_check_text({"runtime": "apache-tvm", "skipped": "built for aarch64", "on_devices": [entry]})
    assert lines[0].endswith("not run here: built for aarch64") and lines[1].startswith("  on pi5-emu (apache-tvm")


# ----------------------------------------------------------------------------- what load.py may import


def _imports(source: str) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "load.py is one file: no relative imports"
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("backend, runtime", [("onnxruntime", "onnxruntime"), ("openvino", "openvino"),
                                              ("tflite", "ai_edge_litert"), ("tvm", "tvm")])
def test_every_load_py_imports_only_the_standard_library_numpy_and_its_runtime(backend, runtime):
    from edgeopt.consumer.writer import load_py_source

    manifest = {"runtime": {"backend": backend, "model": "m", "settings": {}, "io": {}}, "precision": "fp32",
                "profile": "pi5", "inputs": [{"name": "x", "shape": [1, 3], "dtype": "float32"}]}
    imported = _imports(load_py_source(manifest))
    assert imported - set(sys.stdlib_module_names) == {"numpy", runtime}


@pytest.mark.parametrize("backend", ["onnxruntime", "openvino", "tflite", "tvm"])
def test_load_py_keeps_a_0d_input_0d(backend):
    """Silero VAD's sample rate is a 0-d int64 input: ``np.ascontiguousarray`` would hand the runtime shape (1,)."""
    from edgeopt.consumer.writer import load_py_source

    manifest = {"runtime": {"backend": backend, "model": "m", "settings": {}, "io": {}}, "precision": "fp32",
                "profile": "pi5", "inputs": [{"name": "sr", "shape": [], "dtype": "int64"},
                                             {"name": "x", "shape": [1, 576], "dtype": "float32"}]}
    source = load_py_source(manifest)
    assert "ascontiguousarray(" not in source.replace("np.ascontiguousarray(v)", "")  # only inside contiguous()
    space: dict = {"__name__": "load", "__file__": "load.py"}
    exec(compile(source, "load.py", "exec"), space)  # noqa: S102 - the generated file, as a module
    stacked = {"sr": np.array([16000, 16000]), "x": np.zeros((2, 1, 576), np.float32)}
    feeds = space["sample"](stacked, 1)
    assert space["contiguous"](feeds["sr"]).shape == () and feeds["sr"].dtype == np.int64
    assert space["contiguous"](np.zeros((3, 4)).T).flags.c_contiguous


def test_the_guard_holds_the_board_lock_a_measurement_takes(tmp_path):
    """With --board-lock the guard takes the runner's lock (an flock on the same file) before load.py runs: held by
    a measurement, it waits its seconds and exits EXIT_BOARD_BUSY naming the holder; free, it runs load.py and
    leaves the lock released, so the next measurement finds no stale holder."""
    from edgeopt.remote.consumer import GUARD
    from edgeopt.runtime.board_lock import EXIT_BOARD_BUSY, BoardLock

    lock = tmp_path / "board.lock"
    good = tmp_path / "good.py"
    good.write_text("import sys\nprint(sys.argv[1:])\n")
    owner = json.dumps({"host": "me", "pid": 1, "device": "board"})
    argv = [sys.executable, "-c", GUARD, "--board-lock", str(lock), "0.5", owner, str(good), "--x", "1"]
    with BoardLock(str(lock), {"host": "ci-7", "pid": 4242, "device": "board"}).acquire(0):
        busy = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert busy.returncode == EXIT_BOARD_BUSY, busy.stderr
    assert json.loads(busy.stdout.strip().splitlines()[-1])["error"]["holder"]["host"] == "ci-7"
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "['--x', '1']", done.stderr
    left = json.loads(lock.read_text())
    assert left["released"] is True and left["device"] == "board"
    again = BoardLock(str(lock)).acquire(0)
    assert again.info["broke_stale_lock_of"] is None
    again.release()


@pytest.mark.remote
def test_load_py_on_a_busy_board_waits_then_names_the_holder(emulated_x86, tiny_artifact, tmp_path):
    """The consumer check on the board takes the board lock as remote-bench does: a board held by another
    measurement is exit 6 naming the holder after the wait, and load.py does not run beside it."""
    from edgeopt.errors import RemoteError
    from edgeopt.remote.consumer import run_load_py
    from edgeopt.remote.probe import open_transport
    from edgeopt.runtime.board_lock import BoardLock

    dev = emulated_x86["device"]
    with open_transport(dev) as tr:  # the loopback device's work dir is on this machine
        lock = Path(tr.work_dir) / "board.lock"
    inputs = tmp_path / "inputs.npz"
    np.savez(inputs, x=np.zeros((1, 4), np.float32))
    with BoardLock(str(lock), {"host": "ci-7", "pid": 4242, "device": "x86-emu"}).acquire(0):
        with pytest.raises(RemoteError) as e:
            run_load_py(dev, tiny_artifact, inputs, tmp_path / "out.npz", wait=0.5)
    assert e.value.exit_code == 6 and "the board is busy: held by host ci-7 pid 4242" in e.value.message
    assert not (tmp_path / "out.npz").exists()
