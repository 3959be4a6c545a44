"""One measurement per board at a time: the runner holds ``<work_dir>/board.lock`` (flock) for the
whole measurement. Real runs over the real loopback sshd (the emulated x86 device)."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import run_cli

from edgeopt.runtime.board_lock import BoardBusy, BoardLock, describe_holder

FAST = ["--min-runs", "3", "--min-seconds", "0", "--warmup", "1"]


def _lock_path(device) -> Path:
    from edgeopt.remote.probe import open_transport

    with open_transport(device) as tr:  # the loopback device's work dir is on this machine
        return Path(tr.work_dir) / "board.lock"


def _lock_is_free(path: Path) -> bool:
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


def _json(r) -> dict:
    return json.loads(r.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- the runner's lock itself


def test_board_lock_waits_then_names_the_holder(tmp_path):
    path = str(tmp_path / "board.lock")
    seen = []
    with BoardLock(path, {"host": "ci-7", "pid": 4242, "device": "pi5-a"}).acquire(0) as held:
        assert held.info["exclusive"] and held.info["waited_for"] is None
        with pytest.raises(BoardBusy) as err:
            BoardLock(path).acquire(0.5, lambda holder, waited: seen.append(holder))
    assert err.value.holder["host"] == "ci-7" and err.value.waited_s >= 0.5
    assert seen and seen[0]["pid"] == 4242
    assert describe_holder(err.value.holder).startswith("host ci-7 pid 4242 (runner pid ")
    again = BoardLock(path).acquire(0)  # released: free at once, not a stale lock
    assert again.info["broke_stale_lock_of"] is None
    again.release()


# ----------------------------------------------------------------------------- remote-bench over the loopback sshd


@pytest.mark.remote
@pytest.mark.slow
def test_two_concurrent_remote_bench_on_one_device_serialize(emulated_x86, tiny_artifact):
    args = ["remote-bench", "x86-emu", str(tiny_artifact), "--min-runs", "20", "--min-seconds", "1.5",
            "--warmup", "1", "--json"]
    results = [None, None]

    def one(i: int) -> None:
        results[i] = run_cli(*args, timeout=300)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outs = []
    for r in results:
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(_json(r)["results"][0])
    windows = sorted(tuple(o["environment"]["measured_unix"]) for o in outs)
    assert windows[0][1] <= windows[1][0], f"measurements overlapped: {windows}"
    for o in outs:
        assert o["exclusive"] is True and o["board_lock"]["exclusive"] is True and o["run_id"]
        held = (o["board_lock"]["held_from_unix"], o["board_lock"]["held_until_unix"])
        assert held[0] <= o["environment"]["measured_unix"][0] and o["environment"]["measured_unix"][1] <= held[1]
        assert o["environment"]["load_before"] is not None and o["environment"]["interference"] is not None
    second = max(outs, key=lambda o: o["board_lock"]["wait_seconds"])
    assert second["board_lock"]["wait_seconds"] > 0.5 and second["board_lock"]["waited_for"]["device"] == "x86-emu"
    waited = [r for r in results if "the board is busy: held by host " in r.stderr]
    assert len(waited) == 1 and "waiting up to 300 s" in waited[0].stderr
    from edgeopt.results import get_run

    for o in outs:  # the store keeps it: exclusive, the lock wait, and what else ran meanwhile
        stored = get_run(o["run_id"])["result"]
        assert stored["exclusive"] is True and stored["board_lock"]["wait_seconds"] == o["board_lock"]["wait_seconds"]
        assert stored["environment"]["interference"] is not None and stored["environment"]["load_after"] is not None


@pytest.mark.remote
def test_a_held_board_makes_remote_bench_wait_then_exit_6_naming_the_holder(emulated_x86, tiny_artifact):
    path = _lock_path(emulated_x86["device"])
    with BoardLock(str(path), {"host": "ci-runner-7", "pid": 31337, "device": "x86-emu"}).acquire(0):
        t0 = time.monotonic()
        r = run_cli("remote-bench", "x86-emu", str(tiny_artifact), *FAST, "--wait", "2", "--json")
        took = time.monotonic() - t0
    assert r.returncode == 6, r.stderr[-2000:]
    assert "x86-emu: the board is busy: held by host ci-runner-7 pid 31337" in r.stderr
    assert "waiting up to 2 s" in r.stderr
    err = _json(r)["error"]
    assert "held by host ci-runner-7 pid 31337" in err["message"] and "for more than 2 s" in err["message"]
    assert "--wait" in err["hint"] and err["details"]["holder"]["pid"] == 31337
    assert took >= 2
    assert _lock_is_free(path)


@pytest.mark.remote
def test_a_dead_holders_stale_lock_is_broken(emulated_x86, tiny_artifact):
    path = _lock_path(emulated_x86["device"])
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys, time\nfrom edgeopt.runtime.board_lock import BoardLock\n"
         "BoardLock(sys.argv[1], {'host': 'gone-host', 'pid': 999999, 'device': 'x86-emu'}).acquire(0)\n"
         "print('held', flush=True)\ntime.sleep(600)\n", str(path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        assert not _lock_is_free(path)
    finally:
        holder.kill()  # dies holding the lock: its name stays in the file, the flock goes with it
        holder.wait()
    r = run_cli("remote-bench", "x86-emu", str(tiny_artifact), *FAST, "--wait", "5", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    lock = _json(r)["results"][0]["board_lock"]
    assert lock["exclusive"] and lock["wait_seconds"] < 1
    assert lock["broke_stale_lock_of"]["host"] == "gone-host" and lock["broke_stale_lock_of"]["runner_pid"] == holder.pid
    assert "busy" not in r.stderr


@pytest.mark.remote
@pytest.mark.slow
def test_ctrl_c_releases_the_board(emulated_x86, tiny_artifact):
    path = _lock_path(emulated_x86["device"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgeopt", "remote-bench", "x86-emu", str(tiny_artifact), "--min-runs", "100000",
         "--min-seconds", "120", "--warmup", "1", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and (not path.exists() or _lock_is_free(path)):
            time.sleep(0.2)
        assert not _lock_is_free(path), "the runner never took the board lock"
        holder = json.loads(path.read_text())
        assert holder["pid"] == proc.pid and holder["device"] == "x86-emu"
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130
    end = time.monotonic() + 15
    while time.monotonic() < end and not _lock_is_free(path):
        time.sleep(0.2)
    assert _lock_is_free(path)


@pytest.mark.remote
def test_without_the_lock_the_result_says_not_exclusive(emulated_x86, tiny_artifact):
    """EDGEOPT_NO_BOARD_LOCK=1 exists for bench/board_contention.py; such a run records exclusive: false."""
    r = run_cli("remote-bench", "x86-emu", str(tiny_artifact), *FAST, "--json", env={"EDGEOPT_NO_BOARD_LOCK": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    res = _json(r)["results"][0]
    assert res["exclusive"] is False and res["board_lock"]["exclusive"] is False
    assert "--no-board-lock" in res["board_lock"]["why"]
