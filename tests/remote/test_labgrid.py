"""Board farms: devices that are labgrid places. The real thing on loopback: labgrid-coordinator on
127.0.0.1, an exporter whose places export a NetworkService pointing at the test sshd (the emulated
x86 device), and the real ``edgeopt`` CLI acquiring, using and releasing the places."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import run_cli

BIN = Path(sys.executable).parent
FAST = ["--min-runs", "3", "--min-seconds", "0", "--warmup", "1"]
PLACES = ("pi5-01", "pi5-02")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise AssertionError(f"nothing listens on {port}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture
def farm(emulated_x86, tmp_path):
    """A coordinator and an exporter on loopback; places pi5-01 and pi5-02 (tags board=pi5), each with a
    NetworkService that points at the emulated device's sshd."""
    emu = emulated_x86["device"]
    port = _free_port()
    d = tmp_path / "farm"
    d.mkdir()
    groups = {f"{p}-group": {"NetworkService": {"address": emu.host, "port": emu.port, "username": emu.user}}
              for p in PLACES}
    (d / "exporter.yaml").write_text(json.dumps(groups))  # JSON is YAML
    coordinator = subprocess.Popen([str(BIN / "labgrid-coordinator"), "-l", f"127.0.0.1:{port}"], cwd=d,
                                   stdout=open(d / "coordinator.log", "w"), stderr=subprocess.STDOUT)
    exporter = None
    try:
        _wait_port(port)
        exporter = subprocess.Popen([str(BIN / "labgrid-exporter"), "-c", f"127.0.0.1:{port}", "-n", "exp1",
                                     "--hostname", "127.0.0.1", str(d / "exporter.yaml")], cwd=d,
                                    stdout=open(d / "exporter.log", "w"), stderr=subprocess.STDOUT)
        env = {"LG_COORDINATOR": f"127.0.0.1:{port}"}

        def client(*args, user: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
            e = {**os.environ, **env, **({"LG_USERNAME": user} if user else {})}
            r = subprocess.run([str(BIN / "labgrid-client"), *args], capture_output=True, text=True, env=e,
                               timeout=60)
            assert not check or r.returncode == 0, r.stderr
            return r

        for place in PLACES:
            client("-p", place, "create")
            client("-p", place, "add-match", f"exp1/{place}-group/*")
            client("-p", place, "set-tags", "board=pi5")
        end = time.monotonic() + 30
        while time.monotonic() < end and client("resources").stdout.count("NetworkService") < len(PLACES):
            time.sleep(0.3)
        assert client("resources").stdout.count("NetworkService") == len(PLACES), (d / "exporter.log").read_text()
        yield {"coordinator": f"127.0.0.1:{port}", "client": client, "emu": emu, "dir": d}
    finally:
        if exporter is not None:
            _stop(exporter)
        _stop(coordinator)


def _holder(farm, place: str) -> str | None:
    for line in farm["client"]("-p", place, "show").stdout.splitlines():
        if line.strip().startswith("acquired:"):
            value = line.split(":", 1)[1].strip()
            return None if value == "None" else value
    raise AssertionError("labgrid-client show printed no 'acquired:' line")


def _add(farm, name: str, *where: str) -> None:
    emu = farm["emu"]
    r = run_cli("devices", "add", name, *where, "--coordinator", farm["coordinator"], "--profile", "host",
                "--key", emu.key, "--known-hosts", emu.known_hosts, "--python", emu.python,
                "--work-dir", emu.work_dir, "--json")
    assert r.returncode == 0, r.stderr


def _last_json(r) -> dict:
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_readme_devices_add_command_makes_a_labgrid_device(remote_env):
    r = run_cli("devices", "add", "pi5-farm", "--labgrid-place", "pi5-03", "--coordinator", "farm.lan:20408",
                "--profile", "pi5", "--json")
    assert r.returncode == 0, r.stderr
    dev = _last_json(r)["device"]
    assert dev["transport"] == "labgrid" and dev["labgrid_place"] == "pi5-03" and dev["host"] is None
    r = run_cli("devices", "add", "pi5-any", "--labgrid-tags", "board=pi5", "--coordinator", "farm.lan:20408",
                "--profile", "rpi5")
    assert r.returncode == 0, r.stderr
    listed = run_cli("devices", "list")
    assert "labgrid pi5-03 @ farm.lan:20408" in listed.stdout and "labgrid board=pi5 @ farm.lan:20408" in listed.stdout
    devs = {d["name"]: d for d in _last_json(run_cli("devices", "list", "--json"))["devices"]}
    assert devs["pi5-any"]["labgrid_tags"] == {"board": "pi5"} and devs["pi5-any"]["profile"] == "pi5"
    bad = run_cli("devices", "add", "x", "--labgrid-place", "p", "--profile", "pi5")
    assert bad.returncode == 3 and "needs a coordinator" in bad.stderr
    both = run_cli("devices", "add", "y", "--host", "h", "--labgrid-place", "p", "--coordinator", "c:1",
                   "--profile", "pi5")
    assert both.returncode == 2 and "not both" in both.stderr


@pytest.mark.remote
@pytest.mark.labgrid
@pytest.mark.slow
def test_remote_bench_through_a_labgrid_place_stores_a_result_and_frees_the_place(farm, tiny_artifact):
    _add(farm, "pi5-farm", "--labgrid-place", "pi5-01")
    r = run_cli("remote-bench", "pi5-farm", str(tiny_artifact), *FAST, "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    res = _last_json(r)["results"][0]
    assert res["device"] == "pi5-farm" and res["run_id"] and res["latency_ms"]["n"] >= 3
    assert res["exclusive"] is True
    assert res["labgrid"] == {"place": "pi5-01", "coordinator": farm["coordinator"],
                              "ssh": f"127.0.0.1:{farm['emu'].port}", "reserved_by_tags": False}
    assert f"pi5-farm: acquired labgrid place 'pi5-01' (127.0.0.1:{farm['emu'].port})" in r.stderr
    assert _holder(farm, "pi5-01") is None
    check = run_cli("devices", "check", "pi5-farm", "--json")  # the probe goes through the place too
    assert check.returncode == 0, check.stderr[-2000:]
    assert _last_json(check)["check"]["reachable"] and _last_json(check)["check"]["python"]
    assert _holder(farm, "pi5-01") is None


@pytest.mark.remote
@pytest.mark.labgrid
@pytest.mark.slow
def test_two_concurrent_remote_bench_on_one_place_serialize(farm, tiny_artifact):
    _add(farm, "pi5-farm", "--labgrid-place", "pi5-01")
    args = [sys.executable, "-m", "edgeopt", "remote-bench", "pi5-farm", str(tiny_artifact), "--min-runs", "20",
            "--min-seconds", "1.5", "--warmup", "1", "--json"]
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err[-3000:]
    results = [json.loads(out.strip().splitlines()[-1])["results"][0] for out, _ in outs]
    assert all(r["run_id"] and r["labgrid"]["place"] == "pi5-01" for r in results)
    windows = sorted(tuple(r["environment"]["measured_unix"]) for r in results)
    assert windows[0][1] <= windows[1][0], f"measurements overlapped: {windows}"
    waited = [err for _, err in outs if "pi5-farm: labgrid place 'pi5-01' is busy: held by " in err]
    assert len(waited) == 1
    assert _holder(farm, "pi5-01") is None


@pytest.mark.remote
@pytest.mark.labgrid
@pytest.mark.slow
def test_a_place_held_by_someone_else_waits_then_exit_6_naming_the_holder(farm, tiny_artifact):
    _add(farm, "pi5-farm", "--labgrid-place", "pi5-01")
    farm["client"]("-p", "pi5-01", "acquire", user="ci-job-41")
    try:
        holder = _holder(farm, "pi5-01")
        assert holder.endswith("/ci-job-41")
        t0 = time.monotonic()
        r = run_cli("remote-bench", "pi5-farm", str(tiny_artifact), *FAST, "--wait", "2", "--json")
        assert time.monotonic() - t0 >= 2
    finally:
        farm["client"]("-p", "pi5-01", "release", user="ci-job-41")
    assert r.returncode == 6, r.stderr[-3000:]
    assert f"pi5-farm: labgrid place 'pi5-01' is busy: held by {holder}" in r.stderr
    assert "waiting up to 2 s" in r.stderr
    err = _last_json(r)["error"]
    assert f"held by {holder}" in err["message"] and "for more than 2 s" in err["message"]
    assert "--wait" in err["hint"]


@pytest.mark.remote
@pytest.mark.labgrid
@pytest.mark.slow
def test_ctrl_c_releases_the_place(farm, tiny_artifact):
    _add(farm, "pi5-farm", "--labgrid-place", "pi5-01")
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgeopt", "remote-bench", "pi5-farm", str(tiny_artifact), "--min-runs", "100000",
         "--min-seconds", "120", "--warmup", "1", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = Path(farm["emu"].work_dir).expanduser() / "board.lock"
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and not (lock.exists() and '"device": "pi5-farm"' in lock.read_text()
                                              and "released" not in lock.read_text()):
            time.sleep(0.2)  # measuring: the place is acquired and the runner holds the board
        assert _holder(farm, "pi5-01") is not None
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err[-2000:]
    assert _holder(farm, "pi5-01") is None


@pytest.mark.remote
@pytest.mark.labgrid
@pytest.mark.slow
def test_a_fleet_over_tags_spreads_over_the_free_places(farm, tiny_artifact):
    _add(farm, "farm-a", "--labgrid-tags", "board=pi5")
    _add(farm, "farm-b", "--labgrid-tags", "board=pi5")
    r = run_cli("remote-bench", "farm-a", "farm-b", str(tiny_artifact), *FAST, "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    results = _last_json(r)["results"]
    assert {res["device"] for res in results} == {"farm-a", "farm-b"}
    assert {res["labgrid"]["place"] for res in results} == set(PLACES)
    assert all(res["labgrid"]["reserved_by_tags"] for res in results)
    taken = {}
    for line in r.stderr.splitlines():
        if ": acquired labgrid place '" in line:
            name = line.split(":", 1)[0].strip()
            taken[name] = line.split("'")[1]
    assert set(taken) == {"farm-a", "farm-b"} and set(taken.values()) == set(PLACES)
    assert _holder(farm, "pi5-01") is None and _holder(farm, "pi5-02") is None
    reservations = farm["client"]("reservations").stdout
    assert "token" not in reservations  # cancelled after use, not left to expire


def test_without_labgrid_installed_exit_4_names_the_extra_fake_import_block(remote_env):
    """labgrid is installed here, so its absence is simulated by blocking the import (sys.modules)."""
    run_cli("devices", "add", "pi5-farm", "--labgrid-place", "pi5-03", "--coordinator", "127.0.0.1:1",
            "--profile", "host")
    code = ("import sys; sys.modules['labgrid'] = None\n"
            "from edgeopt.cli import main\nsys.exit(main(sys.argv[1:]))")
    r = subprocess.run([sys.executable, "-c", code, "devices", "check", "pi5-farm"], capture_output=True, text=True,
                       env={**os.environ}, timeout=120)
    assert r.returncode == 4, r.stderr
    assert "labgrid is not installed" in r.stderr and "edgeopt[labgrid]" in r.stderr
