"""``convert --backend auto`` on the host profile: each installed backend builds the model with
the same options, the artifacts are timed here in blocks, and the fastest that holds the bound is written, with
every backend's figures and why it was chosen or dropped in the manifest."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
@pytest.mark.onnxruntime
@pytest.mark.openvino
def test_auto_writes_the_fastest_backend_that_holds_with_every_backend_in_the_manifest(
        mnist_model, mnist_calib, mnist_test, tmp_path, cli):
    r = cli("convert", mnist_model, "--profile", "host", "--backend", "auto", "--precision", "int8", "--calib",
            mnist_calib, "--eval", mnist_test, "--max-accuracy-drop", "2", "-o", tmp_path / "o")
    assert r.returncode == 0, r.stderr
    manifest = json.loads((tmp_path / "o" / "manifest.json").read_text())
    rows = manifest["backend_search"]
    assert {"openvino", "onnxruntime"} <= {row["backend"] for row in rows} and "tvm" not in {row["backend"] for row in rows}
    chosen = [row for row in rows if row["verdict"] == "chosen"]
    assert len(chosen) == 1 and chosen[0]["backend"] == manifest["backend"]
    timed = [row for row in rows if "latency_ms" in row]
    assert chosen[0]["latency_ms"] == min(row["latency_ms"] for row in timed)
    assert all(row["precision"] == "int8" and row["units"]["quantized"] > 0 for row in timed)
    assert all(row["why"].startswith("slower") for row in timed if row["verdict"] == "dropped")
    assert f"backend {manifest['backend']}: " in r.stdout and "chosen (the fastest that holds the bound)" in r.stdout
    assert not [p for p in tmp_path.iterdir() if ".backends-" in p.name]  # the other builds are gone
    claim = manifest["speed_claim"]  # the chosen one's speed-up, measured on the written artifact, is what is printed
    assert claim["source"] == "backend_auto" and claim["estimate"] == chosen[0]["speedup_vs_reference"]
    assert f"x{claim['measured']:.2f} ONNX Runtime FP32 measured on the written artifact" in r.stdout


def test_auto_is_refused_for_a_board_whose_speed_this_machine_cannot_measure(mnist_model, tmp_path, cli):
    r = cli("convert", mnist_model, "--profile", "pi5", "--backend", "auto", "-o", tmp_path / "o")
    assert r.returncode == 2
    assert "needs this machine's profile, not pi5's" in r.stderr and "remote-bench" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "o").exists()


def test_auto_dry_run_names_every_backend_it_would_build(mnist_model, cli):
    r = cli("convert", mnist_model, "--profile", "host", "--backend", "auto", "--dry-run", "--json")
    assert r.returncode == 0, r.stderr
    note = [w for w in json.loads(r.stdout)["warnings"] if w.startswith("--backend auto")]
    assert note and "openvino" in note[0] and "onnxruntime" in note[0] and "tvm" not in note[0]
