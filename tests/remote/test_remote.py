"""Deploy and benchmark on devices: emulated x86 (real sshd, host python) and, slow, an emulated
Raspberry Pi 5 (real sshd, aarch64 Python under qemu, the aarch64 onnxruntime wheel)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from fixtures_remote import host_outputs
from remote_testing import ANY, REST, RecordingTransport

from edgeopt.errors import ExitCode, RemoteError
from edgeopt.remote import deploy
from edgeopt.remote.bench import remote_bench
from edgeopt.remote.inventory import add_device, make_device
from edgeopt.remote.transport import LocalTransport

FAST = ["--min-runs", "3", "--min-seconds", "0", "--warmup", "1"]
FAST_KW = dict(min_runs=3, min_seconds=0, warmup=1)


def _run_dirs(work_dir) -> list[str]:
    return sorted(p.name for p in Path(work_dir).glob("run-*"))


def _local_device(tmp_path, **kw):
    return make_device(name="here", host="localhost", profile="host", python=sys.executable,
                       work_dir=str(tmp_path / "work"), **kw)


# ----------------------------------------------------------------------------- no sshd needed


def test_deploy_runs_the_expected_commands(remote_env, tmp_path, tiny_artifact):
    dev = _local_device(tmp_path)
    inner = LocalTransport(dev.work_dir)
    work = inner.work_dir
    rec = RecordingTransport(inner)
    rec.expect("sh", "-c", deploy.LIST_SCRIPT, "edgeopt-list", work)
    rec.expect("mkdir", "-p", "--", lambda p: p.startswith(f"{work}/run-"))
    rec.expect("mkdir", "-p", "--", REST)
    rec.expect("sh", "-c", deploy.LINK_SCRIPT, "edgeopt-link", REST)
    rec.expect("sh", "-c", deploy.RUN_WRAPPER, "edgeopt-run", ANY, sys.executable, "-m", "edgeopt_runtime", "bench",
               "artifact", "--json", "--location", "remote", REST)
    rec.expect("rm", "-rf", "--", lambda p: p.startswith(f"{work}/run-"))
    res = remote_bench(dev, tiny_artifact, transport=rec, store=False, **FAST_KW)
    rec.verify()
    assert res["location"] == "remote" and res["latency_ms"]["n"] >= 3
    assert rec.count("put") == res["upload"]["files"] + 1  # every file once, plus the lock
    assert _run_dirs(work) == []  # removed after the run

    rec2 = RecordingTransport(LocalTransport(dev.work_dir))
    res2 = remote_bench(dev, tiny_artifact, transport=rec2, store=False, **FAST_KW)
    assert rec2.count("put") == 1  # only the lock: every file's sha256 matched the cache
    assert res2["upload"]["skipped"] == res2["upload"]["files"] and res2["upload"]["uploaded"] == 0


def test_fake_recorder_reports_commands_that_never_ran():
    rec = RecordingTransport().expect("uname", "-m", stdout="aarch64\n").expect("true")
    assert rec.run(["uname", "-m"], timeout=5).stdout == "aarch64\n"
    with pytest.raises(AssertionError, match="unexpected command"):
        rec.run(["reboot"], timeout=5)
    with pytest.raises(AssertionError, match=r"did not run: \[\['true'\]\]"):
        rec.verify()


def test_stale_run_dirs_are_cleaned(tmp_path):
    tr = LocalTransport(tmp_path / "work")
    w = Path(tr.work_dir)
    dead = subprocess.Popen(["true"])
    dead.wait()
    me = socket.gethostname()
    locks = {
        "run-old": None, "run-kept": None,
        "run-runner-dead": f"host=other\npid=1\nrpid={dead.pid}\n",
        "run-runner-alive": f"host=other\npid=1\nrpid={os.getpid()}\n",
        "run-upload-died": f"host={me}\npid={dead.pid}\n",
        "run-uploading": f"host={me}\npid={os.getpid()}\n",
    }
    for name, lock in locks.items():
        (w / name).mkdir()
        if lock:
            (w / name / ".lock").write_text(lock)
    old = time.time() - 48 * 3600
    os.utime(w / "run-old", (old, old))
    (w / "cache").mkdir()
    removed = deploy.clean_stale(tr, max_age_hours=24)
    assert sorted(removed) == ["run-old", "run-runner-dead", "run-upload-died"]
    assert _run_dirs(w) == ["run-kept", "run-runner-alive", "run-uploading"]
    assert (w / "cache").is_dir()
    with pytest.raises(RemoteError):
        deploy.remove_run(tr, "cache")


def test_fake_runtime_missing_says_how_to_set_up(remote_env, tmp_path, tiny_artifact):
    fake = tmp_path / "fake_runtime"
    fake.mkdir()
    (fake / "__init__.py").write_text("")
    (fake / "__main__.py").write_text("import sys\nsys.stderr.write('no onnxruntime here\\n')\nsys.exit(4)\n")
    dev = _local_device(tmp_path)
    with pytest.raises(RemoteError) as e:
        remote_bench(dev, tiny_artifact, transport=LocalTransport(dev.work_dir), runtime_dir=fake, store=False)
    assert "not installed" in e.value.message and "--setup" in e.value.hint


# ----------------------------------------------------------------------------- emulated x86 over sshd


@pytest.mark.remote
@pytest.mark.onnxruntime
def test_remote_bench_model_on_emulated_x86(emulated_x86, remote_tiny_model, cli, tmp_path):
    out = tmp_path / "outputs.npz"
    r = cli("remote-bench", "x86-emu", str(remote_tiny_model["model"]), "--backend", "onnxruntime", "--precision", "fp32",
            "--inputs", str(remote_tiny_model["inputs"]), "--outputs", str(out), *FAST, "--json")
    assert r.returncode == 0, r.stderr
    payload = json.loads(r.stdout)
    assert payload["ok"] and payload["failed"] == []
    res = payload["results"][0]
    assert res["device"] == "x86-emu" and res["backend"] == "onnxruntime"
    assert res["location"] == "emulated" and res["environment"]["location"] == "emulated"
    assert "emulated" in res["timings_label"]
    assert res["latency_ms"]["n"] >= 3 and res["inputs"]["synthetic"] is False
    assert res["device_facts"]["arch"] == "x86_64"
    np.testing.assert_allclose(np.load(out)["y"], host_outputs(remote_tiny_model["model"], remote_tiny_model["inputs"]),
                               rtol=1e-5, atol=1e-6)
    from edgeopt.results import list_runs

    stored = list_runs(device="x86-emu")
    assert [s["id"] for s in stored] == [res["run_id"]] and stored[0]["location"] == "emulated"
    assert _run_dirs(emulated_x86["device"].work_dir) == []


@pytest.mark.remote
def test_keep_and_human_output_label_emulated(emulated_x86, tiny_artifact, cli):
    r = cli("remote-bench", "x86-emu", str(tiny_artifact), "--keep", *FAST)
    assert r.returncode == 0, r.stderr
    assert "emulated" in r.stdout and "not the board's speed" in r.stdout
    kept = _run_dirs(emulated_x86["device"].work_dir)
    assert len(kept) == 1
    run = Path(emulated_x86["device"].work_dir, kept[0])
    assert (run / "artifact" / "manifest.json").is_file() and (run / "edgeopt_runtime" / "__main__.py").is_file()
    assert not (run / ".lock").exists()  # kept on purpose: only age removes it


@pytest.mark.remote
def test_artifact_path_with_shell_characters_stays_literal(emulated_x86, tiny_artifact, tmp_path, cli):
    marker = tmp_path / "pwned"
    art = tmp_path / f"art $(touch {marker}) 'q\" `touch {marker}` x"
    shutil.copytree(tiny_artifact, art)
    odd = "$(touch PWNED);'\"`touch PWNED` x.txt"  # a file name: no slashes, so a relative marker
    (art / odd).write_text("odd name")
    r = cli("remote-bench", "x86-emu", str(art), "--keep", *FAST, "--json")
    assert r.returncode == 0, r.stderr
    run = Path(emulated_x86["device"].work_dir, _run_dirs(emulated_x86["device"].work_dir)[0])
    assert (run / "artifact" / odd).read_text() == "odd name"
    assert not marker.exists()
    assert [p for p in tmp_path.rglob("PWNED")] == [] and not Path("PWNED").exists()


@pytest.mark.remote
def test_fleet_one_failing_board_does_not_stop_the_others(emulated_x86, tiny_artifact, cli):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    add_device(emulated_x86["device"].model_copy(update={"name": "offline", "port": port}))
    r = cli("remote-bench", "x86-emu", "offline", str(tiny_artifact), *FAST, "--json")
    assert r.returncode == ExitCode.REMOTE
    payload = json.loads(r.stdout)
    assert payload["ok"] is False
    assert [x["device"] for x in payload["results"]] == ["x86-emu"]
    assert payload["failed"][0]["device"] == "offline" and "cannot connect" in payload["failed"][0]["message"]
    assert "1 of 2 devices failed" in r.stderr


@pytest.mark.remote
def test_remote_bench_all_uses_the_inventory(emulated_x86, tiny_artifact, cli):
    r = cli("remote-bench", "--all", str(tiny_artifact), *FAST, "--streams", "2", "--batch", "2", "--json")
    assert r.returncode == 0, r.stderr
    (res,) = json.loads(r.stdout)["results"]
    assert res["device"] == "x86-emu"
    # the throughput flags reach the on-device runner
    assert res["throughput"]["parallel"]["streams"] == 2 and res["throughput"]["parallel"]["runs"] > 0
    assert res["throughput"]["batched"]["batch"] == 2


@pytest.mark.remote
def test_emulate_cli_status_and_stop(remote_env, cli):
    from fixtures_remote import need_tools

    need_tools("sshd", "ssh-keygen")
    r = cli("emulate", "start", "host", "--name", "cli-emu", "--json")
    assert r.returncode == 0, r.stderr
    pid = json.loads(r.stdout)["emulator"]["pid"]
    try:
        st = json.loads(cli("emulate", "status", "--json").stdout)["emulators"]
        assert [(e["name"], e["running"]) for e in st] == [("cli-emu", True)]
        devs = json.loads(cli("devices", "list", "--json").stdout)["devices"]
        assert devs[0]["name"] == "cli-emu" and devs[0]["emulated"] is True
    finally:
        r = cli("emulate", "stop", "cli-emu", "--json")
    assert r.returncode == 0, r.stderr
    from fixtures_remote import process_gone

    assert process_gone(pid)
    assert json.loads(cli("devices", "list", "--json").stdout)["devices"] == []


# ----------------------------------------------------------------------------- emulated Pi 5 (qemu)


@pytest.mark.remote
@pytest.mark.onnxruntime
@pytest.mark.slow
def test_remote_bench_model_on_emulated_pi5(emulated_pi5, remote_tiny_model, cli, tmp_path):
    out = tmp_path / "outputs.npz"
    r = cli("remote-bench", "pi5-emu", str(remote_tiny_model["model"]), "--backend", "onnxruntime", "--precision", "fp32",
            "--inputs", str(remote_tiny_model["inputs"]), "--outputs", str(out), *FAST, "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)["results"][0]
    assert res["location"] == "emulated" and res["profile"] == "pi5"
    assert res["device_facts"]["arch"] == "x86_64"  # the shell is the host's; the runner's python is aarch64:
    assert res["environment"]["cpu"]["arch"] == "aarch64" and "asimddp" in res["environment"]["cpu"]["isa"]
    assert "onnxruntime" in res["environment"]["libraries"] and "emulating host" in res["device_facts"]["note"]
    np.testing.assert_allclose(np.load(out)["y"], host_outputs(remote_tiny_model["model"], remote_tiny_model["inputs"]),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.remote
def test_ctrl_c_stops_the_remote_runner(emulated_x86, tiny_artifact):
    import signal

    from fixtures_remote import process_gone

    work = Path(emulated_x86["device"].work_dir)
    proc = subprocess.Popen([sys.executable, "-m", "edgeopt", "remote-bench", "x86-emu", str(tiny_artifact),
                             "--min-seconds", "120", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rpid = None
    try:
        end = time.monotonic() + 60
        while rpid is None and time.monotonic() < end and proc.poll() is None:
            for lock in work.glob("run-*/.lock"):
                for line in lock.read_text().splitlines():
                    if line.startswith("rpid="):
                        rpid = int(line[5:])
            time.sleep(0.1)
        assert rpid, "the remote runner never started"
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == ExitCode.INTERRUPTED, err
    assert process_gone(rpid)
    assert _run_dirs(work) == []  # cleaned up on the way out


@pytest.mark.remote
@pytest.mark.slow
def test_setup_installs_a_missing_runtime_from_pushed_wheels(emulated_x86, tiny_artifact, cli):
    """A device whose python lacks numpy/onnxruntime: without --setup it fails saying so; with
    --setup --wheels DIR a venv under the work dir gets them from the host (no index)."""
    system_python = shutil.which("python3", path="/usr/bin")
    if not system_python or subprocess.run([system_python, "-c", "import numpy"], capture_output=True).returncode == 0:
        pytest.skip("needs a system python3 without numpy")
    from fixtures_remote import _REAL_CACHE

    wheels = Path(_REAL_CACHE) / "test-wheels-x86_64-cp311"
    if not list(wheels.glob("onnxruntime-*.whl")):  # fetched once (PyPI), then cached
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(wheels), "--only-binary=:all:",
                        "onnxruntime"], check=True, timeout=600)
    add_device(emulated_x86["device"].model_copy(update={"name": "bare", "python": system_python}))
    r = cli("remote-bench", "bare", str(tiny_artifact), *FAST, "--json")
    assert r.returncode == ExitCode.REMOTE and "--setup" in json.loads(r.stdout)["error"]["hint"]
    r = cli("remote-bench", "bare", str(tiny_artifact), "--setup", "--wheels", str(wheels), *FAST, "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)["results"][0]
    venv_python = Path(emulated_x86["device"].work_dir, "venv", "bin", "python")
    assert venv_python.exists() and res["latency_ms"]["n"] >= 3
    r = cli("remote-bench", "bare", str(tiny_artifact), *FAST, "--json")  # the venv is used from now on
    assert r.returncode == 0, r.stderr
