"""Environment faults are the user's machine, not bugs (issue 13.4): a read-only output or store, a
full disk, a file that is not SQLite, another program's SQLite file: exit 3, one line naming the path
and the OS error, and nothing modified. Mount tests need root (tmpfs) and skip cleanly otherwise."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

FAST_BENCH = ["--runs", "3", "--min-seconds", "0"]


@pytest.fixture
def cli(cli_in_process):
    """These tests judge commands' verdicts (exit codes, messages, JSON): run in this process, no Python start-up."""
    return cli_in_process


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


@pytest.fixture
def mount():
    """``mount(dir, options)``: a tmpfs at ``dir`` (root only), unmounted at the end."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done: list[Path] = []

    def make(d: Path, options: str) -> Path:
        d.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(d)], capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
        done.append(d)
        return d

    yield make
    for d in reversed(done):
        subprocess.run(["umount", "-l", str(d)], check=False)


def _err(r) -> dict:
    assert r.stdout.count("\n") == 1, r.stdout
    return json.loads(r.stdout)["error"]


# --- results store -----------------------------------------------------------------------------------

def test_read_commands_on_a_missing_store_say_so_and_create_nothing(cli, tmp_path):
    db = tmp_path / "nothing-here.db"
    for args in (["results", "list"], ["results", "show", "1"], ["results", "export", "-o", str(tmp_path / "x.json")]):
        r = cli(*args, "--db", str(db), "--json")
        assert r.returncode == 3, (args, r.stderr)
        assert "does not exist" in _err(r)["message"] and str(db) in _err(r)["message"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_file_that_is_not_sqlite_is_refused_untouched(cli, tmp_path, mnist_model):
    db = tmp_path / "notes.db"
    db.write_text("my notes, not a database\n")
    before = _sha(db)
    r = cli("results", "list", "--db", str(db), "--json")
    assert r.returncode == 3 and "not an SQLite file" in _err(r)["message"]
    assert _sha(db) == before and sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


def test_another_programs_sqlite_is_never_modified(cli, tmp_path, mnist_model):
    db = tmp_path / "app.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
        c.execute("INSERT INTO customers VALUES (1, 'ada')")
    c.close()
    before = _sha(db)
    r = cli("results", "list", "--db", str(db), "--json")
    assert r.returncode == 3 and "another program's SQLite database (tables: customers)" in _err(r)["message"]
    # a table named like ours but not ours, and a foreign application_id, are refused too
    db2 = tmp_path / "runs.db"
    with sqlite3.connect(db2) as c:
        c.execute("CREATE TABLE runs (who TEXT, km REAL)")
    c.close()
    db3 = tmp_path / "marked.db"
    with sqlite3.connect(db3) as c:
        c.execute("PRAGMA application_id = 1234")
        c.execute("CREATE TABLE t (x)")
    c.close()
    for other in (db2, db3):
        r = cli("results", "list", "--db", str(other), "--json")
        assert r.returncode == 3 and "another program's" in _err(r)["message"], r.stdout
    assert _sha(db) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.db", "marked.db", "runs.db"]  # no -wal, no -shm


def test_bench_refuses_a_foreign_store_before_measuring(cli, tmp_path, mnist_model):
    from edgeopt.convert import convert

    art = tmp_path / "art"
    convert(str(mnist_model), "host", str(art), backend="onnxruntime", precision="fp32")
    db = tmp_path / "app.db"
    with sqlite3.connect(db) as c:
        c.execute("CREATE TABLE customers (id INTEGER)")
    c.close()
    before = _sha(db)
    r = cli("bench", str(art), *FAST_BENCH, "--db", str(db), "--json")
    assert r.returncode == 3 and "another program's" in _err(r)["message"]
    assert _sha(db) == before


def test_an_unmarked_store_of_an_earlier_edgeopt_is_adopted(tmp_path):
    from edgeopt.results import _SCHEMA, APPLICATION_ID, list_runs, store_run

    db = tmp_path / "old.db"
    with sqlite3.connect(db) as c:
        c.executescript(_SCHEMA)  # what earlier versions made: the runs table, no mark
        c.execute("INSERT INTO runs (created, model, backend, p50_ms, result_json) VALUES ('2026-01-01', 'm', "
                  "'onnxruntime', 1.5, ?)", (json.dumps({"backend": "onnxruntime", "environment": {}}),))
    c.close()
    assert [r["model"] for r in list_runs(db)] == ["m"]
    store_run({"backend": "onnxruntime", "latency_ms": {"p50": 2.0}, "environment": {}}, db)
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    c.close()
    assert len(list_runs(db)) == 2


def test_a_new_store_is_marked(tmp_path):
    from edgeopt.results import APPLICATION_ID, store_run

    db = tmp_path / "new.db"
    store_run({"backend": "onnxruntime", "latency_ms": {"p50": 2.0}, "environment": {}}, db)
    with sqlite3.connect(db) as c:
        assert c.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
    c.close()


# --- read-only and full file systems (root: tmpfs) ---------------------------------------------------

def test_read_only_store_can_be_read_but_not_written(cli, tmp_path, mount, mnist_model):
    from edgeopt.convert import convert
    from edgeopt.results import store_run

    ro = mount(tmp_path / "ro", "size=1m")
    db = ro / "results.db"
    store_run({"backend": "onnxruntime", "latency_ms": {"p50": 2.0}, "environment": {}}, db)
    subprocess.run(["mount", "-o", "remount,ro", str(ro)], check=True)
    r = cli("results", "list", "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["runs"]) == 1
    art = tmp_path / "art"
    convert(str(mnist_model), "host", str(art), backend="onnxruntime", precision="fp32")
    r = cli("bench", str(art), *FAST_BENCH, "--db", str(db), "--json")
    assert r.returncode == 3, r.stderr
    msg = _err(r)["message"]
    assert str(db) in msg and "Read-only file system" in msg
    assert "Traceback" not in r.stderr and "internal error" not in r.stderr


def test_read_only_output_directory_fails_before_converting(cli, tmp_path, mount, mnist_model):
    ro = mount(tmp_path / "ro", "size=1m,ro")
    r = cli("convert", str(mnist_model), "--profile", "host", "-o", str(ro / "art"), "--json")
    assert r.returncode == 3, r.stderr
    err = _err(r)
    assert err["kind"] == "environment" and "Read-only file system" in err["message"]
    assert f"cannot write to output directory '{ro}'" in err["message"]
    assert r.stderr.count("\n") == 1


def test_full_disk_is_one_line_naming_the_path(cli, tmp_path, mount, mnist_model):
    full = mount(tmp_path / "full", "size=64k")
    r = cli("convert", str(mnist_model), "--profile", "host", "--backend", "onnxruntime", "--precision", "fp32",
            "-o", str(full / "art"), "--json")
    assert r.returncode == 3, r.stderr
    err = _err(r)
    assert "No space left on device" in err["message"] and str(full) in err["message"], err
    assert "internal error" not in r.stderr and "try another" not in r.stderr
    assert list(full.iterdir()) == []  # nothing half-written
    r = cli("results", "export", "-o", str(full / "big.json"), "--db", str(tmp_path / "none.db"), "--json")
    assert r.returncode == 3  # the missing store is said first


def test_unknown_device_and_unknown_profile_are_both_bad_input(cli, remote_env, mnist_model, tmp_path):
    r1 = cli("remote-bench", "no-such-board", str(mnist_model), "--json")
    r2 = cli("convert", str(mnist_model), "--profile", "no-such-profile", "-o", str(tmp_path / "a"), "--json")
    assert (r1.returncode, r2.returncode) == (3, 3), (r1.stderr, r2.stderr)


def test_export_onto_a_full_disk_names_the_file(cli, tmp_path, mount):
    from edgeopt.results import store_run

    db = tmp_path / "r.db"
    store_run({"backend": "onnxruntime", "latency_ms": {"p50": 2.0}, "environment": {}, "name": "x" * 5000}, db)
    full = mount(tmp_path / "full", "size=64k")
    fd = os.open(full / "pad", os.O_WRONLY | os.O_CREAT)
    try:  # fill it up
        while os.write(fd, b"\0" * 4096):
            pass
    except OSError:
        pass
    finally:
        os.close(fd)
    r = cli("results", "export", "-o", str(full / "runs.json"), "--db", str(db), "--json")
    assert r.returncode == 3, r.stderr
    msg = _err(r)["message"]
    assert f"'{full / 'runs.json'}': No space left on device (ENOSPC)" in msg, msg
    assert sorted(p.name for p in full.iterdir()) == ["pad"]  # no temporary file left
