"""``edgeopt report``: one self-contained HTML file from stored runs."""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import numpy as np

from edgeopt import results

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "fixtures" / "models" / "digits_cnn.onnx"


def stored_run(db, p50: float, *, stage=None, backend="onnxruntime", precision="fp32", accuracy=None, seed=0,
               **extra):
    """A run as bench stores it, with synthetic latency samples (no model is run)."""
    s = np.random.default_rng(seed).lognormal(np.log(p50), 0.1, 400)
    res = {
        "schema_version": 1, "artifact_hash": f"{seed:064d}", "backend": backend, "precision": precision,
        "model": str(DIGITS), "device": "host", "labels": {"stage": stage} if stage else {}, "runs": 400,
        "name": f"{backend}-{precision}", "samples_ms": s.tolist(), "validation": {"accuracy": accuracy},
        "latency_ms": {"p50": float(np.median(s)), "p90": float(np.percentile(s, 90)), "p99": float(np.percentile(s, 99)),
                       "ci95_low": float(np.percentile(s, 47)), "ci95_high": float(np.percentile(s, 53))},
        "inputs": {"synthetic": True}, "environment": {"location": "local", "cpu": {"model": "test cpu"}},
        **extra,
    }
    return results.store_run(res, db)


def test_report_is_one_self_contained_html_file(cli, tmp_path):
    db = tmp_path / "r.db"
    ids = [stored_run(db, 1.0, stage="fp32", accuracy=99.4, seed=1),
           stored_run(db, 0.8, stage="fused", accuracy=99.4, seed=2,
                      environment={"location": "local", "interference": {"other_busy_pct": 40.0, "steal_pct": 0.0}}),
           stored_run(db, 0.4, stage="int8", precision="int8", accuracy=99.2, seed=3),
           stored_run(db, 0.5, backend="openvino", precision="int8", seed=4, throughput_qps=2000.0,
                      throughput={"parallel": {"throughput_qps": 3456.7, "streams": 2}})]
    out = tmp_path / "report.html"
    p = cli("report", *map(str, ids), "--db", str(db), "-o", str(out), "--json")
    assert p.returncode == 0, p.stderr
    info = json.loads(p.stdout)
    assert info["runs"] == ids and info["waterfall_stages"] == ["fp32", "fused", "int8"] and info["histories"] == 1
    assert [f.name for f in tmp_path.iterdir() if f.suffix != ".db" and not f.name.startswith("r.db")] == ["report.html"]
    page = out.read_text()
    images = re.findall(r'<img[^>]*src="data:image/png;base64,([^"]+)"', page)
    assert len(images) >= 4  # distributions, roofline, waterfall, history
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    assert not re.search(r'(src|href)="(?!data:)', page)  # nothing loaded from elsewhere
    assert "http://" not in page and "https://" not in page
    assert "<script" not in page
    assert "3456.7 (2 streams)" in page  # the parallel-streams throughput of the run that measured it
    assert page.count("machine not idle") == 1 and f"Run {ids[1]}: machine not idle" in page


def test_report_draws_an_early_exit_runs_latency_per_exit(tmp_path):
    """A cascade benched over --inputs: each sample's time and the exit it left at are stored, and the report draws
    them per exit with the worst case and the plain model; a run without exits gets no such figure."""
    from edgeopt.report import build_report

    db = tmp_path / "r.db"
    rng = np.random.default_rng(0)
    exits = rng.choice([0, 1, 2], size=200, p=[0.6, 0.3, 0.1])
    ms = np.array([0.3, 0.9, 1.6])[exits] * rng.lognormal(0, 0.05, 200)
    ee = {"stages": 3, "samples": 200, "mean_ms": float(ms.mean()), "worst_case_ms": 1.8, "plain_ms_at_convert": 1.5,
          "per_sample_ms": ms.tolist(), "per_sample_exit": exits.tolist()}
    plain, cascade = stored_run(db, 1.5, seed=1), stored_run(db, 0.7, seed=2, early_exit=ee)
    info = build_report(tmp_path / "r.html", run_ids=[plain, cascade], db=db)
    assert info["early_exit_runs"] == [cascade]
    page = (tmp_path / "r.html").read_text()
    assert "<h2>Early exits: latency per exit</h2>" in page
    info = build_report(tmp_path / "p.html", run_ids=[plain], db=db)
    assert info["early_exit_runs"] == [] and "latency per exit" not in (tmp_path / "p.html").read_text()


def test_report_without_stage_labels_says_how_to_get_the_waterfall(tmp_path):
    from edgeopt.report import build_report

    db = tmp_path / "r.db"
    stored_run(db, 1.0)
    info = build_report(tmp_path / "r.html", db=db)
    assert any("--label stage=" in n for n in info["notes"])
    assert "--label stage=" in (tmp_path / "r.html").read_text()


def test_report_on_an_empty_or_missing_store_exits_3(cli, tmp_path):
    p = cli("report", "--db", str(tmp_path / "missing.db"), "-o", str(tmp_path / "r.html"))
    assert p.returncode == 3 and "does not exist" in p.stderr
    results.connect(tmp_path / "empty.db").close()  # a store with no runs yet
    p = cli("report", "--db", str(tmp_path / "empty.db"), "-o", str(tmp_path / "r.html"))
    assert p.returncode == 3 and "no runs" in p.stderr
    assert not (tmp_path / "r.html").exists()


def test_report_of_local_and_emulated_runs_has_the_banner_and_a_roofline_each(tmp_path):
    """An emulated pi5 run (device 'pi5-emu', no profile of that name) beside a local one: the banner says
    which runs are emulated, each machine gets its roofline from its stored profile, and history is per machine."""
    from edgeopt.report import build_report

    db = tmp_path / "r.db"
    local = stored_run(db, 0.09, seed=1, profile="pi5",
                       environment={"location": "local", "hostname": "build-7", "cpu": {"model": "Xeon"}})
    emulated = stored_run(db, 3.4, seed=2, profile="pi5", device="pi5-emu", device_profile="pi5",
                          device_facts={"hostname": "build-7"},
                          environment={"location": "emulated", "cpu": {"model": "Cortex-A76", "arch": "aarch64"}})
    info = build_report(tmp_path / "r.html", [local, emulated], db=db)
    page = (tmp_path / "r.html").read_text()
    assert len(info["banner"]) == 2 and info["emulated_runs"] == [emulated]
    assert "1 of 2 runs are EMULATED (qemu/loopback on build-7)" in page
    assert "measured on 2 different machines" in page
    assert info["rooflines"] == 2 and not any("roofline" in n for n in info["notes"])
    assert "History: digits_cnn.onnx measured on pi5-emu (emulated)" in page
    assert "History: digits_cnn.onnx measured on build-7 (local)" in page
    assert "emulated on build-7" in page  # the runs table's location cell
