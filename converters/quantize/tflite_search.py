"""Accuracy-aware INT8 for TFLite (onnx2tf full-integer quantization), within ``--search-budget``.

onnx2tf's INT8 is *full-integer*: every op runs in int8, so there is no per-op float fallback to
search (a mixed float/int8 TFLite model would need the TensorFlow converter's selective quantization,
which onnx2tf does not expose). The search is therefore the quantizer's own options only, in the order
of :mod:`.search`: the conversion the stage already made (per-channel weights, the default), then the
other weight granularity, each scored on the search part and confirmed on the held-back part. A miss
is exit 5 naming the best metric. The result is then timed against the FP32 ``.tflite`` onnx2tf wrote
beside it (same run, same converter), interleaved: a quick estimate, labelled so.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np

from edgeopt.errors import UsageError

from .search import QUICK_S, gate_failure, interleaved_latency_ms, run_search, speed_verdict


def _runner(folder: Path, runtime: dict, threads: int | None):
    from edgeopt.runtime.runners.tflite import Runner

    r = Runner(str(folder), {"runtime": runtime, "inputs": [], "outputs": []}, threads=threads)
    return lambda feed: r.run({k: np.asarray(v) for k, v in feed.items()})


def search_tflite(backend, model, config, ctx, *, onnx_in, onnx_out, keep, calib, folder: Path, target: Path,
                  runtime: dict, checks: dict) -> tuple[dict, dict, dict]:
    """Returns (runtime, checks, report) of the chosen conversion, whose file is then at ``target``."""
    from edgeopt.converters.backends.tflite_convert import MODEL_FILE, IODtype, int8_file, run_onnx2tf

    from .bound import ort_runner

    if ctx.eval is None or len(ctx.eval) < 4:
        raise UsageError("tflite: --max-accuracy-drop needs evaluation data (--eval FILE.npz, >= 4 samples)",
                         "give an .npz with the model's inputs (and 'labels' if you have them)")
    threads = ctx.threads or 2
    search, confirm = ctx.eval.split(config.search_fraction, seed=0)
    fp32_run = ort_runner(ctx.reference_for(model.path), threads)  # unpruned FP32: the gate's reference
    int8_io = config.io_dtype == IODtype.INT8
    made: dict[str, tuple] = {}

    def granularity(per_channel: bool) -> str:
        return "per-channel weights" if per_channel else "per-tensor weights"

    def done():
        made["first"] = (target, runtime, checks)
        return "first", _runner(ctx.artifact_dir, runtime, threads)

    def other():
        work = ctx.work_dir / "onnx2tf_other"
        alt = run_onnx2tf(model.path, work, ctx.work_dir / "onnx2tf_other.log", calib=calib, int8_io=int8_io,
                          per_channel=not config.per_channel, keep_channel_last=keep, progress=None,
                          timeout_s=config.timeout_s)
        cand = ctx.work_dir / "tflite_other"
        cand.mkdir(exist_ok=True)
        shutil.copyfile(int8_file(alt, int8_io), cand / MODEL_FILE)
        rt = {**runtime}
        rt["io"], chk = backend._io_map(model.path, cand / MODEL_FILE, onnx_in, onnx_out, keep,
                                        dataclasses.replace(ctx, artifact_dir=cand), rt)
        made["other"] = (cand / MODEL_FILE, rt, chk)
        return "other", _runner(cand, rt, threads)

    result = run_search(
        options=[(f"onnx2tf -oiqt, {granularity(config.per_channel)}", done),
                 (f"onnx2tf -oiqt, {granularity(not config.per_channel)}", other)],
        rank=None, with_float=None, fp32_run=fp32_run, search=search, confirm=confirm,
        bound=config.max_accuracy_drop, budget_s=config.search_budget_s, progress=ctx.progress,
        what="INT8 search (tflite/onnx2tf)")
    report = result.report
    report["float_fallback"] = ("none: onnx2tf's INT8 is full-integer (every op int8), so no op can be kept in "
                                "float; only the quantizer's options were searched")
    if result.best is None:
        ctx.stage_report().update(accuracy_aware=report)
        raise gate_failure("tflite", result, config.max_accuracy_drop)
    path, runtime, checks = made[result.best.artifact]
    if path != target:
        shutil.copyfile(path, target)
    report["speed"] = _speed(folder, runtime, ctx, config, threads, search)
    return runtime, checks, report


def _speed(folder: Path, runtime: dict, ctx, config, threads: int, search) -> dict:
    """The INT8 artifact against onnx2tf's FP32 .tflite of the same conversion, interleaved."""
    from edgeopt.converters.backends.tflite_convert import MODEL_FILE

    floats = sorted(folder.glob("*_float32.tflite"))
    if not floats:
        entry = {"note": "not timed: onnx2tf wrote no float32 .tflite beside the INT8 one; use edgeopt bench"}
        ctx.warn("tflite: the INT8 result was not timed against FP32 (no float32 .tflite from onnx2tf)")
        return entry
    fdir = ctx.work_dir / "tflite_fp32"
    fdir.mkdir(exist_ok=True)
    shutil.copyfile(floats[0], fdir / MODEL_FILE)
    try:
        runs = {"fp32": _float_runner(fdir / MODEL_FILE, runtime, threads),
                "int8_final": _runner(ctx.artifact_dir, runtime, threads)}
        feed = (ctx.check_samples or search).feed(0)
        latency = interleaved_latency_ms(runs, feed, target_s=QUICK_S)
    except Exception as err:  # noqa: BLE001 - the float file's io may differ: say it was not timed
        ctx.warn(f"tflite: the INT8 result was not timed against FP32 ({type(err).__name__})")
        return {"note": f"not timed: onnx2tf's float32 .tflite did not run with the INT8 io map ({type(err).__name__})"}
    return speed_verdict(latency, final_key="int8_final", runtime="LiteRT (XNNPACK)", min_speedup=config.min_speedup,
                         ctx=ctx, prefix="tflite", threads=threads)


def _float_runner(path: Path, runtime: dict, threads: int | None):
    """onnx2tf's float32 file has no signature: feed its inputs by shape (the INT8 io map's transposes),
    invoke, read nothing back (this run is for timing only)."""
    from edgeopt.runtime.runners.tflite import open_interpreter

    it = open_interpreter(str(path), threads)
    details = it.get_input_details()
    ios = runtime["io"]["inputs"]

    def run(feed):
        used = set()
        for io in ios:
            x = np.asarray(feed[io["name"]], np.float32)
            if io.get("transpose"):
                x = np.transpose(x, io["transpose"])
            d = next(d for d in details if d["index"] not in used and tuple(d["shape"]) == x.shape)
            used.add(d["index"])
            it.set_tensor(d["index"], x)
        it.invoke()
        return {}

    return run
