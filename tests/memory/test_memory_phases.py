"""The device runner's resident memory by phase (edgeopt/runtime/memory.py), and the measurement put beside the
artifact's prediction, as remote-bench reports it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from fixtures_convert import make_ort_artifact

from edgeopt.memory.bench_row import beside_prediction, memory_text

PHASES = """
import json
from edgeopt.runtime.memory import Phases
phases = Phases()
held = b"x" * 20_000_000  # 20 MB touched
phases.mark("load")
held += b"y" * 10_000_000
phases.mark("first_inference")
print(json.dumps({**phases.result(), "held": len(held)}))
"""


def test_phases_count_what_each_phase_made_resident():
    # in a fresh process, as the device runner is: the phases read the process's high-water mark, which a test
    # process that already ran other tests has raised past these allocations
    done = subprocess.run([sys.executable, "-c", PHASES], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    out = json.loads(done.stdout)
    assert out["load_bytes"] >= 19_000_000 and out["first_inference_bytes"] >= out["load_bytes"] + 9_000_000
    assert out["peak_bytes"] == max(out["load_bytes"], out["first_inference_bytes"]) and out["held"] == 30_000_000
    assert "VmHWM" in out["method"]


def test_a_measurement_beside_its_prediction_gives_the_error():
    measured = {"load_bytes": 30_000_000, "first_inference_bytes": 40_000_000, "peak_bytes": 40_000_000}
    row = beside_prediction(measured, {"total_bytes": 36_000_000})
    assert row["error_pct"] == -10.0
    assert "predicted 36 MB (-10 %)" in memory_text("board", row, "peak RSS of the runner on the device")
    assert "error_pct" not in beside_prediction(measured, None)


@pytest.mark.onnxruntime
def test_the_device_runner_reports_memory_by_phase(tmp_path):
    art = make_ort_artifact(tmp_path)
    done = subprocess.run([sys.executable, "-m", "edgeopt.runtime", "bench", str(art), "--min-runs", "3",
                           "--min-seconds", "0", "--warmup", "1"], capture_output=True, text=True, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    mem = json.loads(done.stdout)["memory"]
    assert 0 < mem["load_bytes"] <= mem["first_inference_bytes"] <= mem["steady_bytes"] == mem["peak_bytes"]
