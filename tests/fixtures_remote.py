"""Fixtures for remote tests: a throwaway HOME/config/data dir, real sshd-backed emulated devices
(killed at the end), a tiny ONNX model and its artifact. Loaded as a pytest plugin by conftest."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

# the emulator's sysroot and wheels are cached once per machine, not per test
_REAL_CACHE = os.environ.get("EDGEOPT_CACHE_DIR") or str(
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "edgeopt"
)


@pytest.fixture
def remote_env(tmp_path, monkeypatch):
    """A throwaway HOME, config and data dir (inventory, known_hosts, results) for one test."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    env = {
        "HOME": str(home),
        "EDGEOPT_CONFIG_DIR": str(tmp_path / "config"),
        "EDGEOPT_DATA_DIR": str(tmp_path / "data"),
        "EDGEOPT_CACHE_DIR": _REAL_CACHE,
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)  # no agent keys: only the device's key counts
    return {"tmp": tmp_path, **env}


def need_tools(*tools: str) -> None:
    import shutil

    for tool in tools:
        if not (shutil.which(tool) or os.path.exists(f"/usr/sbin/{tool}")):
            pytest.skip(f"{tool} is not installed (apt-get install openssh-server qemu-user-static mmdebstrap)")


def _start(profile: str, name: str):
    from edgeopt.remote.emulate import start_emulator, stop_emulator
    from edgeopt.remote.inventory import get_device

    st = start_emulator(profile, name)
    try:
        yield {"state": st, "device": get_device(name), "pid": st["pid"]}
    finally:
        stop_emulator(name)


@pytest.fixture
def emulated_x86(remote_env):
    """An emulated x86 device (host python, no qemu) behind a real sshd on 127.0.0.1."""
    pytest.importorskip("paramiko")
    need_tools("sshd", "ssh-keygen")
    yield from _start("host", "x86-emu")


@pytest.fixture
def emulated_pi5(remote_env):
    """An emulated Raspberry Pi 5: sshd on loopback, aarch64 python 3.11 under qemu-user."""
    pytest.importorskip("paramiko")
    need_tools("sshd", "ssh-keygen", "qemu-aarch64-static", "mmdebstrap")
    yield from _start("pi5", "pi5-emu")


def sshd_session_pids(sshd_pid: int) -> list[int]:
    """The per-connection children of a listening sshd (what a dropped link kills)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == sshd_pid:
            out.append(int(stat.parent.name))
    return out


def kill_sshd_sessions(sshd_pid: int) -> int:
    pids = sshd_session_pids(sshd_pid)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


def process_gone(pid: int, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
        except (OSError, IndexError):
            return True
        if state in "ZX":
            return True
        time.sleep(0.05)
    return False


def make_tiny_onnx(path: Path) -> Path:
    """Conv 3->8 (3x3) + ReLU + MatMul to 10 classes on 1x3x16x16: ~0.1 MFLOP."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "W"),
        numpy_helper.from_array(np.zeros(8, np.float32), "B"),
        numpy_helper.from_array((rng.standard_normal((8 * 16 * 16, 10)) * 0.01).astype(np.float32), "W2"),
        numpy_helper.from_array(np.array([1, -1], np.int64), "shape"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Reshape", ["r", "shape"], ["f"]),
        helper.make_node("MatMul", ["f", "W2"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.fixture(scope="session")
def remote_tiny_model(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny")
    model = make_tiny_onnx(d / "tiny.onnx")
    inputs = d / "inputs.npz"
    np.savez(inputs, x=np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32))
    return {"model": model, "inputs": inputs, "dir": d}


@pytest.fixture(scope="session")
def tiny_artifact(remote_tiny_model):
    """The tiny model converted for ``host`` (ONNX Runtime, FP32) by the real converter."""
    from edgeopt.convert import convert

    out = remote_tiny_model["dir"] / "artifact"
    convert(str(remote_tiny_model["model"]), "host", str(out), backend="onnxruntime", precision="fp32")
    return out


def host_outputs(model: Path, inputs: Path) -> np.ndarray:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": np.load(inputs)["x"]})[0]


# ----------------------------------------------------------------------------- pi5 + TFLite (test_remote_pi5)

DIGITS_MODEL = Path(__file__).resolve().parent.parent / "fixtures" / "models" / "digits_cnn.onnx"  # ~0.1 MFLOP, 8x8
DIGITS_CALIB = DIGITS_MODEL.parent.parent / "data" / "digits_calib.npz"
DIGITS_TEST = DIGITS_MODEL.parent.parent / "data" / "digits_test.npz"


@pytest.fixture(scope="session")
def digits_input(tmp_path_factory) -> Path:
    """One real test digit (the first of digits_test.npz) as ``inputs.npz`` for the digits CNN."""
    path = tmp_path_factory.mktemp("digits") / "inputs.npz"
    np.savez(path, input=np.load(DIGITS_TEST)["input"][:1].astype(np.float32))
    return path


@pytest.fixture(scope="session")
def pi5_tflite_artifacts(tmp_path_factory):
    """``precision -> artifact dir`` for the digits CNN, made by the real ``edgeopt convert --profile pi5
    --backend tflite`` on first use (int8 calibrated on digits_calib.npz; fp32)."""
    from conftest import run_cli

    root = tmp_path_factory.mktemp("pi5-tflite")
    made: dict[str, Path] = {}

    def get(precision: str) -> Path:
        if precision not in made:
            out = root / precision
            calib = ["--calib", str(DIGITS_CALIB)] if precision == "int8" else []
            r = run_cli("convert", str(DIGITS_MODEL), "--profile", "pi5", "--backend", "tflite", "--precision",
                        precision, *calib, "-o", str(out), "--json")
            assert r.returncode == 0, r.stderr[-2000:]
            made[precision] = out
        return made[precision]

    return get


def host_litert_outputs(artifact: Path, inputs: Path) -> dict[str, np.ndarray]:
    """The artifact run on this (x86) machine by the same runner code and LiteRT."""
    from edgeopt.runtime.measure import feeds_from_npz, read_artifact
    from edgeopt.runtime.runners import open_runner

    manifest = read_artifact(str(artifact))
    runner = open_runner(str(artifact), manifest=manifest)
    try:
        return runner.run(feeds_from_npz(manifest["inputs"], str(inputs)))
    finally:
        runner.close()
