"""A number never loses where it was measured: the identity stored with every run, like-for-like
comparisons, and the old stores migrated to it."""

from __future__ import annotations

import json
import socket
import sqlite3

import numpy as np
import pytest

from edgeopt import results

FAST = ["--min-runs", "3", "--min-seconds", "0", "--warmup", "1"]


@pytest.fixture
def cli(cli_in_process):
    """These tests judge commands' verdicts (exit codes, messages, JSON): run in this process, no Python start-up."""
    return cli_in_process


def stored(db, samples, *, location="local", hostname="build-7", device=None, threads=2, libraries=None,
           cpu="Test CPU"):
    """A stored run with synthetic latency samples (no model is run) and the identity its environment implies."""
    s = np.asarray(samples, float)
    res = {
        "schema_version": 1, "artifact_hash": "a" * 64, "backend": "onnxruntime", "precision": "fp32",
        "model": "/x/m.onnx", "profile": "pi5", "device": device, "threads": threads, "runs": int(s.size),
        "samples_ms": s.tolist(),
        "latency_ms": {"p50": float(np.median(s)), "p90": float(np.percentile(s, 90)),
                       "p99": float(np.percentile(s, 99)), "ci95_low": float(np.percentile(s, 45)),
                       "ci95_high": float(np.percentile(s, 55))},
        "environment": {"location": location, "hostname": hostname, "cpu": {"model": cpu, "arch": "x86_64"},
                        "libraries": libraries or {"onnxruntime": "1.32.0"}},
    }
    return results.store_run(res, db)


def test_compare_refuses_runs_of_different_devices_unless_allowed(cli, tmp_path):
    db = tmp_path / "r.db"
    rng = np.random.default_rng(0)
    local = stored(db, rng.lognormal(np.log(0.09), 0.1, 200))
    emulated = stored(db, rng.lognormal(np.log(3.4), 0.1, 200), location="emulated", device="pi5-emu",
                      cpu="Cortex-A76")
    p = cli("results", "compare", str(local), str(emulated), "--db", str(db), "--fail-on-regression", "--json")
    assert p.returncode == 3, p.stderr
    err = json.loads(p.stdout)["error"]
    assert err["kind"] == "cross_device" and "location 'local' vs 'emulated'" in err["message"]
    assert "--allow-cross-device" in err["hint"]
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr

    p = cli("results", "compare", str(local), str(emulated), "--db", str(db), "--allow-cross-device", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)["comparison"]
    assert out["cross_device"] is True and out["warnings"][0].startswith("cross-device comparison")
    assert out["identity_b"]["machine"] == "pi5-emu" and out["identity_a"]["machine"] == "build-7"
    p = cli("results", "compare", str(local), str(emulated), "--db", str(db), "--allow-cross-device",
            "--fail-on-regression", "--json")
    assert p.returncode == 5
    details = json.loads(p.stdout)["error"]["details"]
    assert details["warnings"][0].startswith("cross-device comparison")
    p = cli("results", "compare", str(local), str(emulated), "--db", str(db), "--allow-cross-device")
    assert p.returncode == 0 and "warning: cross-device comparison" in p.stdout


def test_compare_warns_on_other_threads_or_library_versions(tmp_path):
    db = tmp_path / "r.db"
    rng = np.random.default_rng(1)
    a = stored(db, rng.lognormal(np.log(1.0), 0.1, 100), threads=2)
    b = stored(db, rng.lognormal(np.log(1.0), 0.1, 100), threads=1, libraries={"onnxruntime": "1.31.0"})
    out = results.compare_runs(a, b, db)
    assert out["cross_device"] is False
    assert "different thread counts: 2 vs 1" in out["warnings"]
    assert "different onnxruntime versions: 1.32.0 vs 1.31.0" in out["warnings"]
    c = stored(db, rng.lognormal(np.log(1.0), 0.1, 100), hostname="other-host")
    with pytest.raises(results.CrossDeviceError, match="machine 'build-7' vs 'other-host'"):
        results.compare_runs(a, c, db)


def _old_store(db):
    """A store written before identities: a local run of a pi5 artifact was filed as device 'pi5'."""
    conn = sqlite3.connect(db)
    conn.executescript("""CREATE TABLE runs (id INTEGER PRIMARY KEY AUTOINCREMENT, created TEXT NOT NULL, model TEXT,
        artifact_hash TEXT, backend TEXT, precision TEXT, device TEXT, location TEXT, label TEXT, stage TEXT,
        p50_ms REAL, result_json TEXT NOT NULL);""")
    old = {"profile": "pi5", "device": "pi5", "latency_ms": {"p50": 0.1},
           "environment": {"location": "local", "hostname": "build-7", "cpu": {"model": "Xeon", "arch": "x86_64"}}}
    conn.execute("INSERT INTO runs (created, model, device, location, p50_ms, result_json) VALUES (?,?,?,?,?,?)",
                 ("2026-11-01T00:00:00", "m.onnx", "pi5", "local", 0.1, json.dumps(old)))
    conn.commit()
    conn.close()
    return old


def test_an_old_store_is_migrated_to_identity_columns(tmp_path):
    db = tmp_path / "old.db"
    old = _old_store(db)
    (row,) = results.list_runs(db)
    assert (row["device"], row["location"], row["cpu_model"], row["built_for"]) == ("build-7", "local", "Xeon", "pi5")
    results.store_run(old, db)  # and new rows go in with the same columns
    assert [r["device"] for r in results.list_runs(db)] == ["build-7", "build-7"]


def test_a_read_only_old_store_is_read_with_identities_fake_access(tmp_path, monkeypatch):
    """A read-only store can't be migrated: its rows get the identity from their JSON. os.access is faked
    (as root every file is writable), the store and sqlite's read-only open are real."""
    import os

    db = tmp_path / "old.db"
    _old_store(db)
    monkeypatch.setattr(os, "access", lambda path, mode: mode != os.W_OK)
    (row,) = results.list_runs(db, device="build-7")
    assert (row["device"], row["cpu_model"], row["built_for"]) == ("build-7", "Xeon", "pi5")
    assert results.get_run(row["id"], db)["device"] == "build-7"
    assert results.list_runs(db, device="pi5") == []
    monkeypatch.undo()
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 0  # nothing was written
    conn.close()


def test_pipeline_latency_gate_does_not_judge_a_pi5_target_by_this_hosts_timing():
    from edgeopt.pipeline.gates import check
    from edgeopt.pipeline.recipe import Gates, LatencySource

    bench = {"p99_ms": 0.1, "runs": 50}
    measured = Gates(max_p99_latency_ms=5.0, latency_source=LatencySource.MEASURED)
    (res,) = check(measured, validation=None, bench=bench, est=None, artifact_bytes=1, target_profile="pi5")
    assert not res.passed and res.value is None and "not on 'pi5'" in res.source
    (res,) = check(measured, validation=None, bench=bench, est=None, artifact_bytes=1, target_profile="host")
    assert res.passed and res.value == 0.1 and res.source.startswith("measured")
    auto = Gates(max_p99_latency_ms=5.0)  # auto: the target's estimate, not this host's measurement
    (res,) = check(auto, validation=None, bench=bench, est={"latency_ms": 7.5}, artifact_bytes=1,
                   target_profile="pi5")
    assert not res.passed and res.value == 7.5 and res.source.startswith("estimated")


@pytest.mark.onnxruntime
@pytest.mark.slow
def test_a_local_run_of_a_pi5_artifact_is_stored_under_the_hosts_identity(cli, tmp_path, remote_tiny_model):
    art = tmp_path / "art_pi5"
    r = cli("convert", str(remote_tiny_model["model"]), "--profile", "pi5", "--backend", "onnxruntime",
            "--precision", "fp32", "-o", str(art), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    db = tmp_path / "r.db"
    r = cli("bench", str(art), "--runs", "5", "--min-seconds", "0", "--warmup", "1", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    (row,) = json.loads(r.stdout)["rows"]
    ident = row["identity"]
    assert ident["machine"] == socket.gethostname() and ident["location"] == "local"
    assert ident["built_for"] == "pi5" and ident["profile"] == "host"
    assert "pi5" not in row["energy_figures"].get("note", "")
    from edgeopt.profiles import load_profile

    host_tdp = load_profile("host").tdp_w
    if row["energy_figures"]["source"] == "estimated":  # the host's TDP, never the Pi's
        assert f"TDP {host_tdp:g} W" in row["energy_figures"]["note"]
    (stored_row,) = results.list_runs(db)
    assert stored_row["device"] == socket.gethostname() and stored_row["built_for"] == "pi5"
    assert results.list_runs(db, device="pi5") == []
    r = cli("results", "list", "--db", str(db))
    assert socket.gethostname() in r.stdout and "pi5" in r.stdout and "…" not in r.stdout


# ----------------------------------------------------------------------------- remote-bench (real sshd on loopback)


@pytest.fixture
def busy_process():
    """A real process that keeps one core busy for the test (stopped by its PID afterwards)."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.remote
@pytest.mark.onnxruntime
def test_remote_bench_warns_when_the_machine_is_busy(emulated_x86, tiny_artifact, busy_process, cli):
    r = cli("remote-bench", "x86-emu", str(tiny_artifact), "--min-runs", "20", "--min-seconds", "2", "--warmup", "1",
            "--json")
    assert r.returncode == 0, r.stderr
    payload = json.loads(r.stdout)
    (res,) = payload["results"]
    other = res["environment"]["interference"]["other_busy_pct"]
    assert other >= 10, res["environment"]["interference"]  # one of this machine's cores spun meanwhile
    assert any("machine not idle" in w for w in res["warnings"])
    assert any(w.startswith("x86-emu: machine not idle") for w in payload["warnings"])
    ident = res["identity"]
    assert ident["machine"] == "x86-emu" and ident["location"] == "emulated"
    assert ident["emulated_on"] == socket.gethostname() and ident["built_for"] == "host"
    assert res["energy_figures"]["source"] == "unavailable"  # qemu/loopback says nothing about the board's power
    from edgeopt.results import list_runs

    (row,) = list_runs()
    assert (row["device"], row["location"], row["emulated_on"]) == ("x86-emu", "emulated", socket.gethostname())
    r = cli("remote-bench", "x86-emu", str(tiny_artifact), *FAST)  # the human output says it too
    assert r.returncode == 0 and "machine not idle" in r.stdout and "precision" in r.stdout


@pytest.mark.remote
@pytest.mark.onnxruntime
def test_inputs_with_several_samples_say_the_first_is_timed(emulated_x86, tiny_artifact, tmp_path, cli):
    inputs = tmp_path / "eight.npz"
    np.savez(inputs, x=np.random.default_rng(3).standard_normal((8, 1, 3, 16, 16)).astype(np.float32))
    r = cli("remote-bench", "x86-emu", str(tiny_artifact), "--inputs", str(inputs), *FAST, "--json")
    assert r.returncode == 0, r.stderr
    (res,) = json.loads(r.stdout)["results"]
    assert res["inputs"]["samples_in_file"] == 8 and res["inputs"]["samples_used"] == 1
    assert any("holds 8 samples" in w and "first one only" in w for w in res["warnings"])
    r = cli("bench", str(tiny_artifact), "--inputs", str(inputs), "--runs", "3", "--min-seconds", "0", "--no-store")
    assert r.returncode == 0, r.stderr
    assert "holds 8 samples" in r.stdout


@pytest.mark.remote
def test_a_failing_device_keeps_the_table_on_stdout_and_says_what_to_do(emulated_x86, tiny_artifact, cli):
    import os
    import signal

    from fixtures_remote import process_gone

    os.kill(emulated_x86["pid"], signal.SIGTERM)  # the emulator's sshd is down; the inventory still lists it
    assert process_gone(emulated_x86["pid"])
    r = cli("remote-bench", "x86-emu", str(tiny_artifact), *FAST)
    assert r.returncode == 6
    assert "x86-emu" in r.stdout and "FAILED" in r.stdout  # the table, on stdout
    assert "[Errno" not in r.stderr and "Connection refused" in r.stderr
    assert "edgeopt emulate start host --name x86-emu" in r.stderr
    r = cli("remote-bench", "x86-emu", str(tiny_artifact), *FAST, "--json")
    err = json.loads(r.stdout)["error"]
    assert err["details"]["step"] == "connect" and "emulate start" in err["hint"]


@pytest.mark.remote
@pytest.mark.onnxruntime
def test_emulate_stop_during_a_run_stops_its_sessions_and_nothing_is_stored(remote_env, tiny_artifact, cli):
    import subprocess
    import sys
    import time
    from pathlib import Path

    from fixtures_remote import need_tools, process_gone

    need_tools("sshd", "ssh-keygen")
    r = cli("emulate", "start", "host", "--name", "stop-emu", "--json")
    assert r.returncode == 0, r.stderr
    emu = json.loads(r.stdout)["emulator"]
    work = Path(emu["work_dir"])
    proc = subprocess.Popen([sys.executable, "-m", "edgeopt", "remote-bench", "stop-emu", str(tiny_artifact),
                             "--min-seconds", "120", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    rpid = None
    try:
        end = time.monotonic() + 60
        while rpid is None and time.monotonic() < end and proc.poll() is None:
            for lock in work.glob("run-*/.lock"):
                rpid = next((int(ln[5:]) for ln in lock.read_text().splitlines() if ln.startswith("rpid=")), None)
            time.sleep(0.1)
        assert rpid, "the remote runner never started"
        r = cli("emulate", "stop", "stop-emu", "--json")
        assert r.returncode == 0, r.stderr
        (stopped,) = json.loads(r.stdout)["stopped"]
        assert stopped["sessions_stopped"] >= 1
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        cli("emulate", "stop")
    assert process_gone(emu["pid"]) and process_gone(rpid)
    assert proc.returncode == 6, err
    error = json.loads(out)["error"]
    assert error["message"] == "stop-emu: connection lost while running the benchmark" and error["details"]["step"] == "bench"
    from edgeopt.results import default_db_path, list_runs

    assert not default_db_path().exists() or list_runs() == []
    assert json.loads(cli("devices", "list", "--json").stdout)["devices"] == []


@pytest.mark.remote
@pytest.mark.onnxruntime
@pytest.mark.slow
def test_bench_outputs_match_the_emulated_pi5s_outputs(emulated_pi5, remote_tiny_model, cli, tmp_path):
    """The same pi5 artifact and inputs: `bench --outputs` here and `remote-bench --outputs` on the emulated
    Cortex-A76 write the same arrays (ONNX Runtime's x86 and aarch64 kernels, compared exactly and to 1e-6)."""
    art = tmp_path / "art_pi5"
    r = cli("convert", str(remote_tiny_model["model"]), "--profile", "pi5", "--backend", "onnxruntime",
            "--precision", "fp32", "-o", str(art), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    here, there = tmp_path / "here.npz", tmp_path / "there.npz"
    inputs = str(remote_tiny_model["inputs"])
    r = cli("bench", str(art), "--inputs", inputs, "--outputs", str(here), "--runs", "3", "--min-seconds", "0",
            "--no-store", "--json")
    assert r.returncode == 0, r.stderr
    r = cli("remote-bench", "pi5-emu", str(art), "--inputs", inputs, "--outputs", str(there), *FAST, "--json")
    assert r.returncode == 0, r.stderr[-3000:]
    (res,) = json.loads(r.stdout)["results"]
    assert res["identity"]["location"] == "emulated" and res["identity"]["built_for"] == "pi5"
    a, b = np.load(here), np.load(there)
    assert a.files == b.files == ["y"]
    diff = float(np.max(np.abs(a["y"] - b["y"])))
    print(f"max |bench - remote-bench| = {diff:.3g}")
    np.testing.assert_allclose(a["y"], b["y"], rtol=1e-6, atol=1e-6)


@pytest.mark.remote
def test_devices_check_on_an_emulated_device_names_the_host_it_runs_on(emulated_x86, cli):
    r = cli("devices", "check", "x86-emu", "--json")
    assert r.returncode == 0, r.stderr
    check = json.loads(r.stdout)["check"]
    assert check["emulates"]["profile"] == "host"
    assert check["emulated_on"]["hostname"] == socket.gethostname() and check["emulated_on"]["arch"]
    r = cli("devices", "check", "x86-emu")
    assert r.returncode == 0 and f"running on host {socket.gethostname()}" in r.stdout


@pytest.mark.onnxruntime
def test_a_remote_run_is_the_devices_with_the_devices_energy_profile(tmp_path, tiny_artifact, remote_env):
    """A device reached through a local transport (no sshd: the transport is the part under test elsewhere)."""
    import sys

    from edgeopt.profiles import load_profile
    from edgeopt.remote.bench import remote_bench
    from edgeopt.remote.inventory import make_device
    from edgeopt.remote.transport import LocalTransport

    dev = make_device(name="board-1", host="localhost", profile="host", python=sys.executable,
                      work_dir=str(tmp_path / "work"))
    res = remote_bench(dev, tiny_artifact, transport=LocalTransport(dev.work_dir), store=False, min_runs=3,
                       min_seconds=0, warmup=1)
    ident = res["identity"]
    assert (ident["machine"], ident["location"], ident["profile"], ident["emulated_on"]) == \
        ("board-1", "remote", "host", None)
    tdp = load_profile("host").tdp_w
    if tdp and res["energy_figures"]["source"] == "estimated":
        assert f"TDP {tdp:g} W" in res["energy_figures"]["note"]
