"""A TVM library cross-compiled for the Raspberry Pi 5 runs on the emulated Cortex-A76: the board's aarch64 site
holds apache-tvm at the host's version with only its runtime library (no ``libtvm_compiler.so``), and
``--verify-on`` runs the artifact there through edgeopt's runner and through its own ``load.py``."""

from __future__ import annotations

import json

import pytest
from fixtures_remote import DIGITS_CALIB, DIGITS_MODEL, _start, need_tools

FAST = ["--min-runs", "3", "--min-seconds", "0", "--warmup", "1"]


def test_the_board_site_pins_tvm_to_the_host_and_keeps_its_runtime_only(tmp_path):
    from edgeopt.converters.registry import hooks_of
    from edgeopt.deps import version_of
    from edgeopt.remote.emulate.sysroot import device_wheels

    host = version_of("apache-tvm")
    wanted = device_wheels()
    assert (f"apache-tvm=={host}" if host else "apache-tvm") in wanted
    assert "apache-tvm-ffi<0.1.15" in wanted and {"ml_dtypes", "typing_extensions"} <= set(wanted)
    lib = tmp_path / "tvm" / "lib"
    lib.mkdir(parents=True)
    for name in ("libtvm_compiler.so", "libtvm_runtime.so"):
        (lib / name).write_bytes(b"\0")
    hooks_of("tvm").prepare_emulated_site(tmp_path)
    assert [p.name for p in lib.iterdir()] == ["libtvm_runtime.so"]
    hooks_of("tvm").prepare_emulated_site(tmp_path)  # again: nothing left to drop, no error


def test_an_aarch64_library_not_loadable_here_names_the_emulated_board(monkeypatch):
    from edgeopt.converters.backends.tvm.consumer import not_loadable_here
    from edgeopt.runtime.runners import tvm as runner

    monkeypatch.setattr(runner, "machine_arch", lambda: "x86_64")
    cpu = {"profile": "pi5", "runtime": {"model": "model.so", "settings": {"arch": "aarch64", "device": "cpu"}}}
    assert "edgeopt emulate start pi5" in not_loadable_here(cpu)
    gpu = {"profile": "jetson-orin-nano",
           "runtime": {"model": "model.so", "settings": {"arch": "aarch64", "device": "cuda"}}}
    assert "emulate" not in not_loadable_here(gpu) and "--verify-on" in not_loadable_here(gpu)
    monkeypatch.setattr(runner, "machine_arch", lambda: "aarch64")
    assert not_loadable_here(cpu) is None


@pytest.fixture
def emulated_pi5_with_tvm(remote_env):
    """The emulated Pi 5, once its site holds the aarch64 TVM runtime (skipped where the wheel is neither cached
    nor downloadable)."""
    pytest.importorskip("paramiko")
    pytest.importorskip("tvm")
    need_tools("sshd", "ssh-keygen", "qemu-aarch64-static", "mmdebstrap", "aarch64-linux-gnu-g++")
    from edgeopt.errors import RemoteError
    from edgeopt.remote.emulate.sysroot import ensure_site

    try:
        ensure_site()
    except RemoteError as err:
        pytest.skip(f"the aarch64 apache-tvm wheel is not cached and can't be fetched: {err}")
    yield from _start("pi5", "pi5-emu")


@pytest.mark.remote
@pytest.mark.slow
@pytest.mark.tvm
def test_pi5_tvm_library_is_verified_and_benchmarked_on_the_emulated_board(emulated_pi5_with_tvm, cli, tmp_path):
    out = tmp_path / "tvm-pi5"
    r = cli("convert", str(DIGITS_MODEL), "--profile", "pi5", "--backend", "tvm", "--precision", "fp32",
            "--calib", str(DIGITS_CALIB), "-o", str(out), "--verify-on", "pi5-emu", "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["runtime"]["settings"]["arch"] == "aarch64"
    vo = manifest["verified_on"]
    assert vo["device"] == "pi5-emu" and vo["emulated"] is True and vo["device_arch"] == "aarch64"
    assert vo["samples"] == 8 and vo["passed"] is True and vo["max_abs_diff"] <= vo["tolerance"]
    check = manifest["consumer_check"]
    assert check["skipped"] and "runs on the device" in check["skipped"]  # an aarch64 library: not loadable here
    (on_board,) = check["on_devices"]  # the artifact's load.py under qemu, no edgeopt there
    assert on_board["where"] == "pi5-emu" and on_board["device_arch"] == "aarch64" and on_board["passed"] is True
    assert on_board["samples"] == 8 and on_board["runtime"].startswith("apache-tvm ")
    assert on_board["max_abs_diff"] <= on_board["tolerance"]

    b = cli("remote-bench", "pi5-emu", str(out), *FAST, "--json")
    assert b.returncode == 0, b.stderr[-3000:]
    (res,) = json.loads(b.stdout)["results"]
    assert res["location"] == "emulated" and "emulated" in res["timings_label"]
    assert res["environment"]["cpu"]["arch"] == "aarch64" and "apache-tvm" in res["environment"]["libraries"]
    assert res["latency_ms"]["n"] >= 3
