"""The device inventory (devices.toml): typed entries, validation, atomic writes, the CLI."""

from __future__ import annotations

import json
import sys

import pytest

from edgeopt.errors import BadInputError, ExitCode, UsageError
from edgeopt.remote import inventory as inv

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


@pytest.fixture
def cli(cli_in_process):
    """These tests judge commands' verdicts (exit codes, messages, JSON): run in this process, no Python start-up."""
    return cli_in_process


def test_roundtrip_with_awkward_strings(remote_env):
    dev = inv.make_device(
        name="pi5.lab_1", host="pi.local", port=2222, user="pi", key="~/.ssh/id ed25519", profile="pi5",
        python='/opt/py "3"/bin/python3 -X utf8', work_dir="C:\\odd\\dir\t/é/\x7f", env={"PYTHONPATH": "/a:/b"},
    )
    path = inv.add_device(dev)
    assert path == inv.devices_file() and str(path).startswith(remote_env["EDGEOPT_CONFIG_DIR"])
    assert inv.load_devices() == {"pi5.lab_1": dev}
    tomllib.loads(path.read_text())  # our writer produced valid TOML
    assert [p.name for p in path.parent.iterdir()] == ["devices.toml"]  # no temp file left behind


def test_names_are_validated(remote_env):
    for bad in ("pi; touch /tmp/pwned", "a b", "../x", "", ".", "pi$(id)", "x\ny"):
        with pytest.raises(UsageError, match="invalid device name"):
            inv.make_device(name=bad, host="h", profile="pi5")
    with pytest.raises(BadInputError, match="host"):
        inv.make_device(name="ok", host="-oProxyCommand=x", profile="pi5")


def test_unknown_key_is_an_error_with_did_you_mean(remote_env):
    f = inv.devices_file()
    f.parent.mkdir(parents=True)
    f.write_text('[devices.pi]\nhots = "x"\nprofile = "pi5"\n')
    with pytest.raises(BadInputError, match="unknown key 'hots'") as e:
        inv.load_devices()
    assert e.value.hint == "did you mean 'host'?"


def test_unknown_device_suggests_close_name(remote_env):
    inv.add_device(inv.make_device(name="pi5-lab", host="h", profile="pi5"))
    with pytest.raises(BadInputError) as e:  # an unknown device is bad input (exit 3), like an unknown profile
        inv.get_device("pi5-lba")
    assert "pi5-lab" in e.value.hint


def test_devices_file_option(tmp_path, remote_env):
    f = tmp_path / "elsewhere.toml"
    inv.add_device(inv.make_device(name="a", host="h", profile="pi5"), f)
    assert list(inv.load_devices(f)) == ["a"] and inv.load_devices() == {}


def test_cli_add_list_remove(remote_env, cli):
    r = cli("devices", "add", "pi5-lab", "--host", "10.1.2.3", "--user", "pi", "--profile", "pi5", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["device"]["host"] == "10.1.2.3"
    r = cli("devices", "add", "pi5-lab", "--host", "x", "--profile", "pi5", "--json")
    assert r.returncode == ExitCode.USAGE and "already exists" in r.stderr
    r = cli("devices", "list", "--json")
    assert [d["name"] for d in json.loads(r.stdout)["devices"]] == ["pi5-lab"]
    r = cli("devices", "remove", "pi5-lab", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["removed"] == "pi5-lab"
    assert json.loads(cli("devices", "list", "--json").stdout)["devices"] == []


def test_cli_rejects_injection_in_name_and_unknown_profile(remote_env, cli, tmp_path):
    marker = tmp_path / "pwned"
    r = cli("devices", "add", f"pi; touch {marker}", "--host", "h", "--profile", "pi5", "--json")
    assert r.returncode == ExitCode.USAGE and "invalid device name" in r.stderr
    r = cli("remote-bench", f"pi; touch {marker}", str(tmp_path), "--json")
    assert r.returncode == ExitCode.USAGE and "invalid device name" in r.stderr
    r = cli("devices", "add", "ok", "--host", "h", "--profile", "pi55", "--json")
    assert r.returncode == ExitCode.BAD_INPUT and "pi5" in r.stderr
    assert not marker.exists() and not inv.devices_file().exists()
