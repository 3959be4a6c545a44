"""``edgeopt emulate``: every missing system tool named at once before any work (exit 4, one apt command),
and one rule for "no such device" (exit 3, one line, "did you mean") across emulate, remote-bench and devices."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


def _one_error_line(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("edgeopt: error: "), r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


def _fake_path(tmp_path: Path, *tools: str) -> str:
    """A PATH holding only ``tools`` (links to the real ones): the rest are 'not installed'."""
    import shutil

    d = tmp_path / "fake-bin"
    d.mkdir()
    for tool in tools:
        real = shutil.which(tool)
        if real is None:
            pytest.skip(f"{tool} is not installed here")
        (d / tool).symlink_to(real)
    return str(d)


def _sshd_outside_path() -> bool:
    return any(os.access(f"{d}/sshd", os.X_OK) for d in ("/usr/sbin", "/sbin"))


def test_emulate_start_names_every_missing_tool_at_once(remote_env, cli, tmp_path):
    cache = tmp_path / "empty-cache"  # no sysroot built yet: mmdebstrap is needed too
    r = cli("emulate", "start", "pi5", "--json", env={"PATH": _fake_path(tmp_path), "EDGEOPT_CACHE_DIR": str(cache)})
    assert r.returncode == 4, r.stderr
    line = _one_error_line(r)
    for tool, package in (("qemu-aarch64-static", "qemu-user-static"), ("mmdebstrap", "mmdebstrap"),
                          ("ssh-keygen", "openssh-client")):
        assert f"{tool} (package {package})" in line
    err = json.loads(r.stdout)["error"]
    assert err["kind"] == "missing_dependency" and err["exit_code"] == 4
    wanted = ["openssh-client", "qemu-user-static", "mmdebstrap"]
    if not _sshd_outside_path():  # sshd is found in /usr/sbin even off PATH, as users' sshd usually is
        wanted.insert(0, "openssh-server")
    assert err["details"]["apt_packages"] == wanted
    assert f"apt-get install {' '.join(wanted)}" in line  # one command installs them all
    # nothing was started or written: no emulator state, no inventory entry, no cache
    assert not (Path(remote_env["EDGEOPT_DATA_DIR"]) / "emulate").exists()
    assert not (Path(remote_env["EDGEOPT_CONFIG_DIR"]) / "devices.toml").exists()
    assert not cache.exists()


def test_a_built_sysroot_needs_no_mmdebstrap_and_host_needs_no_qemu(remote_env, cli, tmp_path):
    from edgeopt.remote.emulate.sysroot import COMPLETE, SUITE

    cache = tmp_path / "cache"
    sysroot = cache / "emulate" / f"sysroot-{SUITE}-arm64"
    sysroot.mkdir(parents=True)
    (sysroot / COMPLETE).write_text("ok\n")
    path = _fake_path(tmp_path, "ssh-keygen")
    r = cli("emulate", "start", "pi5", "--json", env={"PATH": path, "EDGEOPT_CACHE_DIR": str(cache)})
    assert r.returncode == 4
    line = _one_error_line(r)
    assert "qemu-aarch64-static (package qemu-user-static)" in line and "mmdebstrap" not in line
    if _sshd_outside_path():  # an x86 device needs only sshd and ssh-keygen, both here: it starts
        r = cli("emulate", "start", "host", "--name", "t-emu", "--json", env={"PATH": path})
        assert r.returncode == 0, r.stderr
        assert cli("emulate", "stop", "t-emu").returncode == 0


def _unknown(r, name: str) -> dict:
    assert r.returncode == 3, r.stderr
    _one_error_line(r)
    err = json.loads(r.stdout)["error"]
    assert err["kind"] == "unknown_device" and err["exit_code"] == 3 and f"unknown device '{name}'" in err["message"]
    return err


def test_no_such_device_is_exit_3_in_every_command(remote_env, cli):
    """Nothing emulated is running and the inventory has one board: every command says the same."""
    from edgeopt.remote.inventory import add_device, make_device

    add_device(make_device(name="pi5-lab", host="10.0.0.7", profile="pi5"))
    for argv in (("emulate", "stop", "pi5-lba"), ("remote-bench", "pi5-lba", "model.onnx"),
                 ("devices", "check", "pi5-lba"), ("devices", "remove", "pi5-lba")):
        err = _unknown(cli(*argv, "--json"), "pi5-lba")
        if argv[0] != "emulate":
            assert err["hint"] == "did you mean 'pi5-lab'?"
    err = _unknown(cli("emulate", "stop", "pi5-emu", "--json"), "pi5-emu")
    assert "no emulated device is running" in err["hint"] and "edgeopt emulate start pi5" in err["hint"]
    r = cli("emulate", "stop", "pi5-lab", "--json")  # a real board is not an emulator: same class, its own words
    assert r.returncode == 3 and "'pi5-lab' is a real device, not an emulated one" in _one_error_line(r)


@pytest.mark.remote
def test_emulate_stop_of_a_near_name_says_did_you_mean(emulated_x86, cli):
    err = _unknown(cli("emulate", "stop", "x86-em", "--json"), "x86-em")
    assert err["hint"] == "did you mean 'x86-emu'?"
    err = _unknown(cli("emulate", "stop", "host", "--json"), "host")  # the profile's name: its running emulator
    assert "'host' is a profile, not a device" in err["hint"] and "edgeopt emulate stop x86-emu" in err["hint"]
    _unknown(cli("remote-bench", "x86-em", "model.onnx", "--json"), "x86-em")


def test_a_site_built_before_openvino_was_added_is_completed_in_place(tmp_path):
    """The emulated board's aarch64 site lists its wheels, so ``ensure_site`` adds only what it lacks instead of
    rebuilding; an older marker ("ok") lists none, so every wheel is installed over that site again."""
    from edgeopt.remote.emulate.sysroot import COMPLETE, device_wheels, installed_wheels

    wheels = device_wheels()
    assert installed_wheels(tmp_path) is None  # no marker: not complete, built from scratch
    (tmp_path / COMPLETE).write_text("ok\n")
    assert installed_wheels(tmp_path) == set() and "openvino" in wheels
    (tmp_path / COMPLETE).write_text("\n".join(wheels) + "\n")
    assert installed_wheels(tmp_path) == set(wheels)
