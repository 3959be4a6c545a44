"""bench/device_matrix.py's table: what each ARM cell wrote (with a float written in INT8's stead marked) and
what the board check said. The matrix itself is a benchmark, not a test: only its reporting is tested here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def matrix():
    spec = importlib.util.spec_from_file_location("device_matrix_under_test", BENCH / "device_matrix.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop(spec.name, None)


def _cell(**kw) -> dict:
    base = {"model": "m", "profile": "pi5", "exit_code": 0, "seconds": 12.0, "artifact": True,
            "backend": "onnxruntime", "precision": "int8", "artifact_bytes": 2_000_000,
            "units": {"quantized": 3, "float": 1},
            "command": "edgeopt convert m.onnx --profile pi5 --precision int8 --verify-on pi5-emu",
            "held_back": {"metric": "top1_accuracy", "unit": "%", "fp32": 100.0, "artifact": 99.0, "drop": 1.0,
                          "within_bound": True}}
    return {**base, **kw}


def test_table_shows_the_precision_written_and_marks_a_float_fallback(matrix):
    cells = [_cell(), _cell(model="lstm", precision="fp16", backend="tflite",
                            precision_fallback={"requested": "int8", "reason": "no INT8 mode held the bound"})]
    rows = matrix.table({"cells": cells, "verify_on": "pi5-emu"}).splitlines()
    assert "| written |" in rows[0] and "| board check |" in rows[0]
    assert "| onnxruntime int8 |" in rows[2] and "fallback" not in rows[2]
    assert "| tflite fp16 (fallback: int8 held on no mode; no confidence bound on the drop) |" in rows[3]


def test_a_float_fallback_after_the_board_refused_int8_says_so(matrix):
    """convert --verify-on went on to a float precision because the board could not run the last INT8 artifact
    (the precision fallback's exit code 6): both tables say that, not that INT8 held on no mode."""
    spec = importlib.util.spec_from_file_location("docs_renderers_under_test", BENCH / "docs_renderers.py")
    docs_renderers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(docs_renderers)
    fb = {"requested": "int8", "reason": "ee-pi5: the device's runtime could not run the artifact: …", "exit_code": 6}
    cell = _cell(model="basic_pitch", precision="fp16", backend="tflite", precision_fallback=fb)
    row = matrix.table({"cells": [cell], "verify_on": "ee-pi5"}).splitlines()[2]
    assert "| tflite fp16 (fallback: the last int8 built did not run on the board; " in row
    assert "held on no mode" not in row
    assert docs_renderers._written(cell) == "tflite fp16 (float fallback: the last INT8 built did not run on the board)"
    assert docs_renderers._written({**cell, "precision_fallback": {**fb, "exit_code": 5}}) == "tflite fp16 (float fallback)"


def test_an_int8_that_is_mostly_float_says_so_in_the_written_column(matrix):
    cell = _cell(units={"quantized": 11, "float": 40},
                 verdict="mostly float: 11 of 51 compute ops in model_int8.tflite are quantized (the rest kept …)")
    row = matrix.table({"cells": [cell, _cell()]}).splitlines()
    assert "| onnxruntime int8 (mostly float) | " in row[2] and "| 11 / 40 |" in row[2]
    assert "| onnxruntime int8 | " in row[3]


def test_a_board_that_could_not_run_the_artifact_is_not_called_a_missing_artifact(matrix):
    cell = _cell(artifact=None, exit_code=6, reason="pi5-emu: the runner failed with exit 3: …")
    row = matrix.table({"cells": [cell], "verify_on": "pi5-emu"}).splitlines()[2]
    assert "| did not run there (exit 6) |" in row and "not run (no artifact)" not in row


def test_a_float_fallback_shows_the_gates_drop_upper_bound(matrix):
    gate = matrix.gate_bound({"metric_drop": 0.4, "drop_upper": 1.25, "confidence": 0.95, "samples": 70})
    assert gate == {"drop": 0.4, "drop_upper": 1.25, "confidence": 0.95, "samples": 70}
    cell = _cell(precision="fp16", backend="tflite", gate=gate,
                 precision_fallback={"requested": "int8", "reason": "no INT8 mode held the bound"})
    row = matrix.table({"cells": [cell]}).splitlines()[2]
    assert "| tflite fp16 (fallback: int8 held on no mode; drop up to 1.25 at 0.95 confidence) |" in row


def test_table_shows_the_board_check_and_a_metric_outside_the_bound(matrix):
    verified = {"device": "pi5-emu", "passed": True, "max_abs_diff": 0.0, "tolerance": 0.0039}
    cells = [_cell(verified_on=verified),
             _cell(model="vad", artifact=None, exit_code=5, reason="--verify-on pi5-emu: output 'y' differs"),
             _cell(model="cls", artifact=None, exit_code=5, reason="INT8 misses --max-accuracy-drop 2"),
             _cell(model="det", profile="host", command="edgeopt convert det.onnx --profile host",
                   held_back={"metric": "f1", "unit": "%", "fp32": 90.0, "artifact": 87.0, "drop": 3.0,
                              "within_bound": False})]
    rows = matrix.table({"cells": cells, "verify_on": "pi5-emu"}).splitlines()[2:]
    assert "| pi5-emu ok (0 <= 0.0039) |" in rows[0]
    cells[0]["verified_on"] = {**verified, "max_abs_diff": 0.006, "tolerance": 0.0019,
                               "error_vs_fp32": {"board": 0.04975, "here": 0.04976}}
    row = matrix.table({"cells": cells, "verify_on": "pi5-emu"}).splitlines()[2]
    assert "| pi5-emu ok (as accurate: error vs FP32 0.0498 there, 0.0498 here) |" in row
    assert "| mismatch (exit 5) |" in rows[1]
    assert "| not run (no artifact) |" in rows[2]
    assert "f1: 90 -> 87 % (outside the bound)" in rows[3] and "| - |" in rows[3]  # host: no board check


def test_combine_keeps_every_cell_and_each_runs_environment(matrix):
    def run(profile, commit, load):
        return {"bench": "device_matrix", "bound_points": 2.0, "verify_on": "pi5-emu", "edgeopt_commit": commit,
                "machine": {"load_before": [load, 0, 0]}, "versions": {"onnxruntime": "1.32.0"},
                "cases": {"m": {"kind": "k"}}, "cells": [_cell(profile=profile)]}

    rerun = run("pi5", "fed", 2.0)
    rerun["cells"][0]["exit_code"] = 5
    merged = matrix.combine([run("pi5", "abc", 1.0), run("host", "def+dirty", 5.0), rerun])
    assert [(c["profile"], c["run"], c["exit_code"]) for c in merged["cells"]] == [("pi5", 2, 5), ("host", 1, 0)]
    assert [(c["profile"], c["run"]) for c in merged["superseded"]] == [("pi5", 0)]
    assert merged["edgeopt_commit"] == ["abc", "def+dirty", "fed"]
    assert [(r["profiles"], r["load_before"][0]) for r in merged["runs"]] == [(["pi5"], 1.0), (["host"], 5.0),
                                                                               (["pi5"], 2.0)]
    assert merged["cases"] == {"m": {"kind": "k"}} and merged["verify_on"] == "pi5-emu"


def test_a_combined_matrix_combines_again_keeping_its_runs_and_superseded_cells(matrix):
    """The all-profiles JSON is itself a combination: a rerun combined into it keeps its runs (the cells' run
    numbers follow), the cells it superseded before, and supersedes the cell it reruns."""
    def run(profile, commit):
        return {"bench": "device_matrix", "edgeopt_commit": commit, "machine": {"load_before": [1.0, 0, 0]},
                "cells": [_cell(profile=profile)]}

    first = matrix.combine([run("pi5", "a"), run("host", "b"), run("pi5", "c")])
    again = matrix.combine([first, run("host", "d")])
    assert [(c["profile"], c["run"]) for c in again["cells"]] == [("pi5", 2), ("host", 3)]
    assert [(c["profile"], c["run"]) for c in again["superseded"]] == [("pi5", 0), ("host", 1)]
    assert len(again["runs"]) == 4 and again["edgeopt_commit"] == ["a", "b", "c", "d"]


def test_the_table_shows_the_kind_the_held_back_samples_alone_would_pick(matrix):
    other = {"metric": "ctc_exact_match_vs_fp32", "unit": "%", "fp32": 100.0, "artifact": 97.0}
    hb = {"metric": "per_position_agreement_with_fp32", "unit": "%", "fp32": 100.0, "artifact": 99.5, "drop": 0.5,
          "within_bound": True, "chosen_here": other}
    row = matrix.table({"cells": [_cell(held_back=hb)]}).splitlines()[2]
    assert "per_position_agreement_with_fp32: 100 -> 99.5 %; ctc_exact_match_vs_fp32: 100 -> 97 %" in row
