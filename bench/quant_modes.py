"""INT8 modes × backends on one machine, in one run: each mode's metric on data no step saw, p50 against ONNX
Runtime FP32, and the mode ``convert --precision int8 --max-accuracy-drop B`` chose on each backend.

Models:
- ``lstm``: resemblyzer's pretrained speaker encoder (3 LSTM layers of 256 + Linear + ReLU + L2 norm, built in
  torch from ``resemblyzer/pretrained.pt`` and exported to ONNX), fed 160 frames of 40 mel bands (1.6 s, its
  own partial-utterance size) of espeak-ng speech: 12 voices (espeak's English variants) are 12 speakers, 10
  sentences each: 4 for calibration, 3 for ``--eval`` (the search), 3 unseen. Metric: the user's speaker
  identification (``bench/speaker_metric.py``, leave-one-out nearest centroid), given as ``--metric``.
- ``cnn``: the digits CNN fixture; calibration ``digits_calib``, ``digits_test`` split in half: one half for
  ``--eval``, the other unseen. Metric: top-1 on the human labels.
- ``rapidocr_cls``: rapidocr's pretrained text-line 0/180° classifier (MobileNetV3, from the
  rapidocr-onnxruntime wheel, input fixed at 1x3x48x192), on 300 rendered text lines (labels by construction):
  60 calibration, 120 ``--eval``, 120 unseen. Metric: top-1.

Native float precisions are rows too: on a CPU with AMX/AVX512-BF16 (``native_float_precisions`` of the
``host`` profile), OpenVINO's bf16 (the FP32 model compiled with ``INFERENCE_PRECISION_HINT`` bf16: what a
``--precision bf16`` artifact runs).

Every candidate is built once by the backend's quantizer (no search), then all are timed in **blocks**
(each runtime's calls back to back, blocks alternating over rounds; ONNX Runtime sessions with
``session.intra_op.allow_spinning`` 0), 2 threads. ``choice`` runs the CLI as a user would.

    .venv/bin/python bench/quant_modes.py [--models lstm,cnn,rapidocr_cls] [--bound 1] [--rounds 7] [--threads 2] > out.json

Prints one JSON object. Not a test: no assertions.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from edgeopt.data import Dataset, load_npz  # noqa: E402
from fixtures.speaker_encoder import FRAMES, N_MELS, SR  # noqa: E402,F401  resemblyzer's hparams

VOICES = [f"en+{v}" for v in ("m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5")]
SENTENCES = [
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "A rainbow is a division of white light into many beautiful colors.",
    "She sells sea shells by the sea shore every summer morning.",
    "We will meet at the station at half past seven tomorrow evening.",
    "The old clock on the wall struck twelve as the guests arrived.",
    "Reading books in the library is a quiet way to spend an afternoon.",
    "Turn left at the second traffic light and follow the main road.",
    "Fresh bread from the bakery smells wonderful in the early hours.",
    "Mountains covered in snow glowed pink in the light of the sunset.",
    "My brother keeps a small garden with tomatoes and green beans.",
    "The museum opens its new exhibition of ancient maps next week.",
    "Heavy rain delayed the trains for nearly an hour this morning.",
    "Could you tell me where the nearest post office is, please?",
    "Our team finished the project two days ahead of the deadline.",
    "The children laughed as the puppy chased its own tail in circles.",
]


# ---------------------------------------------------------------------------------- the speaker encoder
def speaker_encoder(work: Path) -> Path:
    from fixtures.speaker_encoder import export_speaker_encoder

    try:
        return export_speaker_encoder(work / "speaker_encoder.onnx", output_name="embed")
    except FileNotFoundError as err:
        raise SystemExit(str(err)) from err


def mel_frames(audio: np.ndarray) -> np.ndarray:
    """[FRAMES, 40] power mel frames (resemblyzer's wav_to_mel_spectrogram) of the loudest 1.6 s."""
    from fixtures.speaker_encoder import mel_power_frames

    audio = audio / (np.sqrt(np.mean(audio ** 2)) + 1e-9) * 10 ** (-30 / 20)  # its -30 dBFS normalisation
    mel = mel_power_frames(audio)
    if len(mel) < FRAMES:
        mel = np.pad(mel, ((0, FRAMES - len(mel)), (0, 0)))
    energy = np.convolve(mel.sum(axis=1), np.ones(FRAMES), mode="valid")
    start = int(np.argmax(energy))
    return mel[start:start + FRAMES].astype(np.float32)


def speaker_data(work: Path) -> dict[str, Path]:
    from fixtures.datasets import espeak

    x, spk, sent = [], [], []
    for s, voice in enumerate(VOICES):
        for k, text in enumerate(SENTENCES):
            x.append(mel_frames(espeak(text, voice=voice, speed=140 + 7 * (k % 4))))
            spk.append(s)
            sent.append(k)
    x, spk, sent = np.stack(x), np.array(spk), np.array(sent)
    parts = {"calib": sent < 4, "eval": (sent >= 4) & (sent < 10), "test": sent >= 10}
    out = {}
    for name, idx in parts.items():
        out[name] = work / f"speech_{name}.npz"
        np.savez(out[name], mels=x[idx], labels=spk[idx])
    return out


def digits_data(work: Path) -> dict[str, Path]:
    data = REPO / "fixtures" / "data"
    test = np.load(data / "digits_test.npz")
    half = len(test["labels"]) // 2
    out = {"calib": data / "digits_calib.npz", "eval": work / "digits_eval.npz", "test": work / "digits_unseen.npz"}
    np.savez(out["eval"], **{k: test[k][:half] for k in test.files})
    np.savez(out["test"], **{k: test[k][half:] for k in test.files})
    return out


# ---------------------------------------------------------------------------------- candidates
def candidates(model: Path, calib: Dataset, work: Path, threads: int) -> list[dict]:
    """Each (backend, mode) built once, with its run function and op counts."""
    import openvino as ov

    from edgeopt.converters.quantize.bound import ort_runner
    from edgeopt.converters.quantize.modes import DynamicMode, Granularity, StaticMode, WeightsMode
    from edgeopt.converters.quantize.nncf_search import compiled_run
    from edgeopt.converters.quantize.onnxruntime_quantizer import OnnxRuntimeQuantizer, count_units
    from edgeopt.converters.quantize.openvino_quantizer import OpenVINOQuantizer, read_model

    rows = [{"backend": "onnxruntime", "mode": "fp32", "run": ort_runner(model, threads, spinning=False),
             "units": count_units(model)}]
    names = [o.name for o in rows[0]["run"].session.get_outputs()]
    oq = OnnxRuntimeQuantizer()
    for mode in (StaticMode(), DynamicMode(), DynamicMode(granularity=Granularity.PER_TENSOR)):
        q = oq.quantize(model, mode, work / f"ort-{mode.kind.value}-{mode.granularity.value}.onnx", calib=calib)
        rows.append({"backend": "onnxruntime", "mode": mode.label(), "run": ort_runner(q.path, threads, spinning=False),
                     "units": (q.quantized_units, q.float_units)})
    core, vq = ov.Core(), OpenVINOQuantizer()
    fp32 = read_model(model)
    ins = [p.get_any_name() for p in fp32.inputs]
    rows.append({"backend": "openvino", "mode": "fp32 (f32 hint)", "run": compiled_run(core, fp32, ins, names, threads),
                 "units": (0, sum(count_units(model)))})
    if host_has_bf16():
        rows.append({"backend": "openvino", "mode": "bf16", "run": compiled_run(core, fp32, ins, names, threads, "bf16"),
                     "units": (0, sum(count_units(model)))})
    for mode in (StaticMode(), WeightsMode()):
        q = vq.quantize(model, mode, work / f"ov-{mode.kind.value}.xml", calib=calib)
        rows.append({"backend": "openvino", "mode": mode.label(),
                     "run": compiled_run(core, core.read_model(str(q.path)), ins, names, threads),
                     "units": (q.quantized_units, q.float_units)})
    return rows


def host_has_bf16() -> bool:
    from edgeopt.enums import Precision
    from edgeopt.float_precisions import native_float_precisions
    from edgeopt.profiles import load_profile

    return Precision.BF16 in native_float_precisions(load_profile("host"), "openvino")


def text_line_data(work: Path) -> tuple[Path, dict[str, Path]]:
    """rapidocr's classifier with its input fixed at 1x3x48x192, and rendered text lines split 60/120/120."""
    import onnx

    from edgeopt.model import fix_input_shapes
    from fixtures.datasets import text_lines
    from fixtures.real_models import real_model

    model = work / "rapidocr_cls.onnx"
    onnx.save(fix_input_shapes(onnx.load(str(real_model("rapidocr_cls"))), {"x": (1, 3, 48, 192)}), str(model))
    d = np.load(text_lines(300, seed=3))
    parts = {"calib": slice(0, 60), "eval": slice(60, 180), "test": slice(180, 300)}
    out = {}
    for name, idx in parts.items():
        out[name] = work / f"lines_{name}.npz"
        np.savez(out[name], x=d["x"][idx], labels=d["labels"][idx])
    return model, out


def score(run, ds: Dataset, metric) -> float:
    outputs = [run(f) for f in ds.feeds()]
    if metric == "top1":
        pred = np.array([int(np.argmax(next(iter(o.values())))) for o in outputs])
        return 100.0 * float(np.mean(pred == ds.labels))
    return float(metric(outputs, ds.labels))


def choice(model: Path, files: dict, backend: str, bound: float, metric: str | None, threads: int, work: Path) -> dict:
    """``edgeopt convert --precision int8 --max-accuracy-drop`` as a user runs it; the mode it chose and why."""
    out = work / f"chosen-{backend}"
    cmd = [sys.executable, "-m", "edgeopt", "convert", str(model), "--profile", "host", "--backend", backend,
           "--precision", "int8", "--calib", str(files["calib"]), "--eval", str(files["eval"]),
           "--max-accuracy-drop", str(bound), "--threads", str(threads), "-o", str(out), "--json"]
    if metric:
        cmd += ["--metric", metric]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO / "bench", timeout=900)
    row = {"command": " ".join(["edgeopt", *cmd[3:]]), "exit": r.returncode}
    if r.returncode != 0:
        row["error"] = r.stderr.strip().splitlines()[-1:] if r.stderr else []
        return row
    manifest = json.loads((out / "manifest.json").read_text())
    stage = "quantize" if backend == "onnxruntime" else backend
    rep = next(s["report"] for s in manifest["stages"] if s["name"] == stage)
    row.update(mode=rep.get("mode"), quantized=rep.get("quantized"), mode_reason=rep.get("mode_reason"),
               mode_search=rep.get("mode_search"), speed=(rep.get("speed") or {}).get("speedup_vs_fp32"),
               validation={k: manifest["validation"].get(k) for k in ("metric", "metric_reference", "metric_value",
                                                                       "metric_drop")})
    return row


def _chosen_label(c: dict) -> str:
    """The bench row of the mode convert chose: the mode search's chosen label, else the stage's mode, per-channel."""
    return (c.get("mode_search") or {}).get("chosen") or f"{c['mode']} per-channel"


def run_model(name: str, work: Path, bound: float, rounds: int, threads: int) -> dict:
    import os

    from edgeopt.converters.quantize.search import blocked_latency_ms

    if name == "lstm":
        sys.path.insert(0, str(REPO / "bench"))
        from speaker_metric import verification

        model, files, metric = speaker_encoder(work), speaker_data(work), verification
        user_metric, data = "speaker_metric:verification", "espeak-ng speech, 12 voices as speakers (labels by construction)"
    elif name == "rapidocr_cls":
        (model, files), metric = text_line_data(work), "top1"
        user_metric, data = None, "rendered text lines, every other one turned 180° (labels by construction)"
    else:
        model, files, metric = REPO / "fixtures" / "models" / "digits_cnn.onnx", digits_data(work), "top1"
        user_metric, data = None, "sklearn digits, human labels"
    calib, test = load_npz(files["calib"]), load_npz(files["test"])
    rank = {"lstm": 3, "cnn": 4, "rapidocr_cls": 4}[name]
    calib.ranks = test.ranks = {k: rank for k in calib.arrays}
    rows = candidates(model, calib, work, threads)
    for r in rows:
        r["metric_unseen"] = round(score(r["run"], test, metric), 3)
    feed, load_before = test.feed(0), os.getloadavg()
    latency = blocked_latency_ms({f"{r['backend']} {r['mode']}": r["run"] for r in rows}, feed, calls=30,
                                 rounds=rounds, target_s=None)
    ref = latency["onnxruntime fp32"]
    fp32_metric = rows[0]["metric_unseen"]
    for r in rows:
        key = f"{r['backend']} {r['mode']}"
        r.update(p50_ms=latency[key], x_vs_ort_fp32=round(ref / latency[key], 3),
                 drop=round(fp32_metric - r["metric_unseen"], 3), quantized_units=r["units"][0],
                 float_units=r["units"][1], within_bound=fp32_metric - r["metric_unseen"] <= bound)
        del r["run"], r["units"]
    int8 = [r for r in rows if "fp32" not in r["mode"] and r["within_bound"]]  # INT8 modes and bf16
    best = max(int8, key=lambda r: r["x_vs_ort_fp32"], default=None)
    load_after = os.getloadavg()
    chosen = {b: choice(model, files, b, bound, user_metric, threads, work) for b in ("onnxruntime", "openvino")}
    for b, c in chosen.items():
        row = next((r for r in rows if r["backend"] == b and c.get("mode") and r["mode"] == _chosen_label(c)), None)
        if row is not None and best is not None:
            c["bench_row"] = {k: row[k] for k in ("mode", "metric_unseen", "drop", "p50_ms", "x_vs_ort_fp32")}
            c["speed_vs_best_single_candidate"] = round(row["x_vs_ort_fp32"] / best["x_vs_ort_fp32"], 3)
    return {"model": name, "data": data, "threads": threads,
            "load_avg_during_timing": {"before": [round(x, 2) for x in load_before],
                                       "after": [round(x, 2) for x in load_after]},
            "metric": "100 - EER % of speaker verification (user metric)" if name == "lstm" else "top1 %",
            "samples": {"calib": len(calib), "unseen": len(test)}, "bound_points": bound, "rows": rows,
            "best_single_candidate_within_bound": best and {k: best[k] for k in ("backend", "mode", "x_vs_ort_fp32")},
            "chosen": chosen}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="lstm,cnn")
    ap.add_argument("--bound", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    from edgeopt.runtime import environment

    out = {"what": "INT8 modes x backends and native float precisions (bf16 where the CPU has it): metric on unseen "
                   "data, p50 vs ONNX Runtime FP32 (blocks, 2 threads), "
                   "and the mode convert chose", "environment": environment.collect(), "models": []}
    out["environment"].pop("_cpu_counters_before", None)
    with tempfile.TemporaryDirectory() as d:
        for name in args.models.split(","):
            work = Path(d) / name
            work.mkdir()
            out["models"].append(run_model(name, work, args.bound, args.rounds, args.threads))
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
