"""The results store (SQLite, concurrent writers) and the regression gate."""

from __future__ import annotations

import csv
import json
import multiprocessing as mp

import numpy as np
import pytest

from edgeopt import results
from edgeopt.bench.stats import compare_samples


@pytest.fixture
def cli(cli_in_process):
    """These tests judge commands' verdicts (exit codes, messages, JSON): run in this process, no Python start-up."""
    return cli_in_process


def fake_result(samples, *, model="m.onnx", backend="onnxruntime", device="host", stage=None, artifact="a" * 64):
    """A stored run as the runner prints it (synthetic samples: no model is run)."""
    s = np.asarray(samples, float)
    return {
        "schema_version": 1, "artifact_hash": artifact, "backend": backend, "precision": "fp32", "model": f"/x/{model}",
        "device": device, "labels": {"stage": stage} if stage else {}, "runs": int(s.size), "samples_ms": s.tolist(),
        "latency_ms": {"p50": float(np.median(s)), "p90": float(np.percentile(s, 90)), "p99": float(np.percentile(s, 99)),
                       "ci95_low": float(np.percentile(s, 45)), "ci95_high": float(np.percentile(s, 55))},
        "environment": {"location": "local"},
    }


def _writer(db: str, worker: int, n: int) -> None:
    for i in range(n):
        results.store_run(fake_result([1.0 + worker, 2.0, 3.0], model=f"w{worker}-{i}.onnx"), db)


def test_store_list_show(tmp_path):
    db = tmp_path / "r.db"
    a = results.store_run(fake_result([1, 2, 3], stage="fp32"), db)
    b = results.store_run(fake_result([2, 3, 4], device="pi5"), db)
    rows = results.list_runs(db)
    assert [r["id"] for r in rows] == [a, b]
    assert rows[0]["model"] == "m.onnx" and rows[0]["stage"] == "fp32" and rows[0]["p50_ms"] == 2.0
    assert [r["id"] for r in results.list_runs(db, device="pi5")] == [b]
    run = results.get_run(b, db)
    assert run["result"]["samples_ms"] == [2, 3, 4]
    with pytest.raises(results.BadInputError):
        results.get_run(999, db)


def test_concurrent_writers_lose_nothing(tmp_path):
    db = str(tmp_path / "r.db")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(db, w, 20)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert all(p.exitcode == 0 for p in procs)
    rows = results.list_runs(db)
    assert len(rows) == 80
    assert len({r["model"] for r in rows}) == 80
    conn = results.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_compare_flags_a_real_regression_and_an_improvement():
    rng = np.random.default_rng(0)
    a = rng.lognormal(np.log(10.0), 0.1, 300)
    b = rng.lognormal(np.log(13.0), 0.1, 300)  # 30 % slower
    out = compare_samples(a, b)
    assert out["verdict"] == "regression"
    assert out["p_value"] < 0.01 and out["relative_change"] == pytest.approx(0.3, abs=0.05)
    assert compare_samples(b, a)["verdict"] == "improvement"


def test_compare_identical_distributions_is_no_change():
    rng = np.random.default_rng(1)
    a = rng.lognormal(np.log(10.0), 0.1, 300)
    b = rng.lognormal(np.log(10.0), 0.1, 300)
    assert compare_samples(a, b)["verdict"] == "no change"


def test_compare_significant_but_small_change_is_no_change():
    rng = np.random.default_rng(2)
    a = rng.normal(10.0, 0.05, 2000)
    b = rng.normal(10.2, 0.05, 2000)  # 2 % slower: p tiny, but under the 5 % threshold
    out = compare_samples(a, b, threshold=0.05)
    assert out["p_value"] < 0.01 and out["verdict"] == "no change"


def _store_pair(db):
    rng = np.random.default_rng(5)
    a = results.store_run(fake_result(rng.lognormal(np.log(10.0), 0.1, 200)), db)
    b = results.store_run(fake_result(rng.lognormal(np.log(13.0), 0.1, 200)), db)
    return a, b


def test_compare_warns_when_a_run_was_measured_on_a_busy_machine(tmp_path):
    db = tmp_path / "r.db"
    rng = np.random.default_rng(6)
    quiet = fake_result(rng.lognormal(np.log(10.0), 0.1, 100))
    quiet["environment"]["interference"] = {"other_busy_pct": 1.0, "steal_pct": 0.0}
    busy = fake_result(rng.lognormal(np.log(10.0), 0.1, 100))
    busy["environment"]["interference"] = {"other_busy_pct": 35.0, "steal_pct": 4.0}
    a, b = results.store_run(quiet, db), results.store_run(busy, db)
    warnings = results.compare_runs(a, b, db)["warnings"]
    assert len(warnings) == 1 and warnings[0].startswith(f"run {b}: machine not idle") and "35 %" in warnings[0]


def test_cli_compare_fail_on_regression_exits_5(cli, tmp_path):
    db = tmp_path / "r.db"
    a, b = _store_pair(db)
    p = cli("results", "compare", str(a), str(b), "--db", str(db), "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["comparison"]["verdict"] == "regression"
    p = cli("results", "compare", str(a), str(b), "--db", str(db), "--fail-on-regression", "--json")
    assert p.returncode == 5
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["error"]["details"]["comparison"]["verdict"] == "regression"
    p = cli("results", "compare", str(b), str(a), "--db", str(db), "--fail-on-regression")
    assert p.returncode == 0 and "improvement" in p.stdout


def test_cli_list_show_export(cli, tmp_path):
    db = tmp_path / "r.db"
    a, b = _store_pair(db)
    p = cli("results", "list", "--db", str(db), "--json")
    assert [r["id"] for r in json.loads(p.stdout)["runs"]] == [a, b]
    p = cli("results", "show", str(b), "--db", str(db), "--json")
    assert json.loads(p.stdout)["run"]["id"] == b
    p = cli("results", "show", "42", "--db", str(db))
    assert p.returncode == 3 and "Traceback" not in p.stderr
    out = tmp_path / "runs.csv"
    p = cli("results", "export", "--format", "csv", "-o", str(out), "--db", str(db), "--json")
    assert p.returncode == 0, p.stderr
    assert [int(r["id"]) for r in csv.DictReader(out.open())] == [a, b]
    out = tmp_path / "runs.json"
    p = cli("results", "export", "-o", str(out), "--db", str(db))
    assert len(json.loads(out.read_text())["runs"]) == 2
    assert not list(tmp_path.glob(".*.tmp"))
