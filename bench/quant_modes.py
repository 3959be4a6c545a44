"""INT8 modes × backends on one machine, in one run: each mode's metric on data no step saw, p50 against ONNX
Runtime FP32, and the mode ``convert --precision int8 --max-accuracy-drop B`` chose on each backend.

Models:
- ``lstm``: resemblyzer's pretrained speaker encoder (3 LSTM layers of 256 + Linear + ReLU + L2 norm, built in
  torch from ``resemblyzer/pretrained.pt`` and exported to ONNX), fed 160 frames of 40 mel bands (1.6 s, its
  own partial-utterance size) of espeak-ng speech: 12 voices (espeak's English variants) are 12 speakers, 28
  sentences each: 4 for calibration, 12 for ``--eval`` (the search), 12 unseen (every other one). Metric: the user's speaker
  verification (``bench/speaker_metric.py``, 100 - EER over all pairs), given as ``--metric``.
- ``cnn``: the digits CNN fixture; calibration ``digits_calib``, ``digits_test`` split in half: one half for
  ``--eval``, the other unseen. Metric: top-1 on the human labels.
- ``rapidocr_cls``: rapidocr's pretrained text-line 0/180° classifier (MobileNetV3, from the
  rapidocr-onnxruntime wheel, input fixed at 1x3x48x192), on 300 rendered text lines (labels by construction):
  60 calibration, 120 ``--eval``, 120 unseen. Metric: top-1.
- the cases of ``bench/real_models.py`` and ``bench/matrix_cases.py`` with their own data and metric (inputs
  fixed at the case's shapes; the case's eval data split in half: ``--eval`` and unseen): ``rapidocr_rec_ctc``
  (PP-OCRv4 CTC recogniser, ``ctc`` vs FP32's reading), ``rapidocr_det_dbnet`` (DBNet detector, ``map_iou`` at
  0.3 vs FP32's map), ``minilm_l6_embedding`` (all-MiniLM-L6-v2, cosine to FP32), ``silero_vad`` (Conv + LSTM,
  top-1 of its speech decision on labels by construction), ``g2p_gru`` (g2p-en's GRU, top-1 agreement with FP32).

Native float precisions are rows too: on a CPU with AMX/AVX512-BF16 (``native_float_precisions`` of the
``host`` profile), OpenVINO's bf16 (the FP32 model compiled with ``INFERENCE_PRECISION_HINT`` bf16: what a
``--precision bf16`` artifact runs), and each OpenVINO INT8 mode with bf16 activations (INT8 weights, its float ops
run at the bf16 hint: candidates of convert's own OpenVINO search on such a CPU, so INT8 rows).

Every plain candidate is built from the **normalized** graph (``converters/normalize.py``'s stage, run here as convert
runs it: shapes checked, constants and Conv+BN folded with onnxslim), the graph convert quantizes, so a plain
candidate and convert's choice differ only by the mode search; ONNX Runtime FP32 as shipped stays the reference
(``onnxruntime fp32``) and the normalized FP32 is a row of its own. Each is built once by the backend's quantizer
(no search), then all are timed in **blocks**
(each runtime's calls back to back, blocks alternating over rounds; ONNX Runtime sessions with
``session.intra_op.allow_spinning`` 0; OpenVINO candidates saved as an artifact and run by edgeopt's shipped runner,
as convert's artifacts are), ``--threads`` threads. A candidate that fails to build is a row with its
error. ``choice`` runs the CLI as a user would (``convert --backend onnxruntime`` and ``--backend openvino``).

    .venv/bin/python bench/quant_modes.py [--models lstm,cnn,rapidocr_cls,g2p_gru,...] [--bound 1] [--rounds 7] \
        [--threads 2] > out.json

Per model the JSON has the fastest candidate within the bound among the plain rows and convert's chosen rows
together (``fastest_within_bound``; bf16 counts) and among the INT8 rows only (``fastest_int8_within_bound``:
``--precision int8`` does not pick plain bf16, by decision; INT8 with bf16 activations counts), and each chosen row's ratio to both (``chosen[backend]
.vs_fastest``: 0.95 or more is the issue's "within 5 %").

Prints one JSON object. Not a test: no assertions.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass
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
    "A cold wind blew across the harbour as the fishing boats came home.",
    "He forgot his umbrella on the bus and walked home in the rain.",
    "The baker added a pinch of salt and a spoonful of honey to the dough.",
    "Bright lanterns lined the narrow street during the autumn festival.",
    "The pilot announced that we would land twenty minutes early today.",
    "Grandmother told us stories about the village where she grew up.",
    "Please remember to switch off the lights when you leave the office.",
    "The orchestra tuned their instruments before the concert began.",
    "A family of ducks crossed the road and stopped all the traffic.",
    "The new bridge will connect the two halves of the city next spring.",
    "Every winter the lake freezes and people skate on the thick ice.",
    "The scientist wrote her results in a notebook with a green cover.",
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
    # 12 sentences a speaker for --eval (144 utterances: 72 searched, 72 confirming) and 12 unseen, every other one
    # (the first 16 and the 12 added later are in both): with 6 and 6, the run's halves (36 utterances) saw no EER
    # drop where the unseen set showed 2 points
    parts = {"calib": sent < 4, "eval": (sent >= 4) & (sent % 2 == 0), "test": (sent >= 4) & (sent % 2 == 1)}
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
def normalized(model: Path, calib: Dataset, work: Path) -> Path:
    """The graph convert quantizes: its ``normalize`` stage run on ``model`` (the stage's defaults, as convert
    without ``--input-shape`` or a recipe configures it)."""
    from edgeopt.converters.base import ChainContext, Intermediate, StageRecord
    from edgeopt.converters.normalize import Normalize, NormalizeConfig

    d = work / "normalize"
    (d / "art").mkdir(parents=True)
    ctx = ChainContext(work_dir=d, artifact_dir=d / "art", reference_model=model, calib=calib,
                       check_samples=calib.subset(np.arange(min(8, len(calib)))), threads=2,
                       record=StageRecord("normalize", {}))
    return Normalize().run(Intermediate(model), NormalizeConfig(), ctx).path


def candidates(shipped: Path, model: Path, calib: Dataset, work: Path, threads: int) -> list[dict]:
    """Each (backend, mode) built once from the normalized ``model``, with its run function and op counts, after
    the reference (ONNX Runtime FP32 on the ``shipped`` file); a build that fails is a row with its error (the
    other candidates still run)."""
    import openvino as ov

    from edgeopt.converters.backends.openvino.quantizer import OpenVINOQuantizer, read_model
    from edgeopt.converters.quantize.modes import DynamicMode, Granularity, StaticMode, WeightsMode
    from edgeopt.converters.quantize.qdq_quantizer import QdqQuantizer
    from edgeopt.quant_units import units_of
    from edgeopt.runtime.run_fn import run_fn

    rows = [{"backend": "onnxruntime", "mode": "fp32", "run": run_fn(shipped, threads, spinning=False),
             "units": units_of(shipped)},
            {"backend": "onnxruntime", "mode": "fp32 (normalized)", "run": run_fn(model, threads, spinning=False),
             "units": units_of(model)}]
    oq = QdqQuantizer()

    def ort(mode):
        q = oq.quantize(model, mode, work / f"ort-{mode.kind.value}-{mode.granularity.value}.onnx", calib=calib)
        return run_fn(q.path, threads, spinning=False), (q.quantized_units, q.float_units)

    for mode in (StaticMode(), DynamicMode(), DynamicMode(granularity=Granularity.PER_TENSOR)):
        rows.append(_built("onnxruntime", mode.label(), lambda m=mode: ort(m)))
    core, vq = ov.Core(), OpenVINOQuantizer()
    fp32 = read_model(model)
    every = (0, sum(units_of(model)))
    rows.append(_built("openvino", "fp32 (f32 hint)", lambda: (ov_shipped_run(fp32, work / "ov-fp32", threads), every)))
    if host_has_bf16():
        rows.append(_built("openvino", "bf16", lambda: (ov_shipped_run(fp32, work / "ov-bf16", threads, "bf16"), every)))

    def nncf(mode, hint="f32"):
        q = vq.quantize(model, mode, work / f"ov-{mode.kind.value}.xml", calib=calib)
        return (ov_shipped_run(core.read_model(str(q.path)), work / f"ov-{mode.kind.value}-{hint}", threads, hint),
                (q.quantized_units, q.float_units))

    for mode in (StaticMode(), WeightsMode()):
        rows.append(_built("openvino", mode.label(), lambda m=mode: nncf(m)))
    if host_has_bf16():  # INT8 weights, float ops and activations in bf16: a candidate of convert's search here
        for mode in (StaticMode(), WeightsMode()):
            rows.append(_built("openvino", f"{mode.label()}, bf16 activations", lambda m=mode: nncf(m, "bf16")))
    return rows


def ov_shipped_run(ov_model, folder: Path, threads: int, precision: str = "f32"):
    """``ov_model`` saved as an artifact's ``model.xml`` and run by edgeopt's shipped OpenVINO runner, as convert's
    artifacts are (inputs bound once, one stream on ``threads`` threads). Compiled as the searches compile them (the
    LATENCY hint, a dict call) beside every other candidate in this process, the plain rows timed up to 2.7x slower
    than the same model shipped (the LSTM's FP32 24-29 ms vs 9.9 ms; alone in a process both take 9-12 ms)."""
    import openvino as ov

    from edgeopt.runtime.runners.openvino import Runner

    folder.mkdir(parents=True, exist_ok=True)
    ov.save_model(ov_model, str(folder / "model.xml"), compress_to_fp16=False)
    io = {"inputs": [{"name": p.get_any_name(), "runtime_name": p.get_any_name(), "transpose": None}
                     for p in ov_model.inputs],
          "outputs": [{"name": p.get_any_name(), "runtime_name": p.get_any_name(), "transpose": None}
                      for p in ov_model.outputs]}
    runtime = {"backend": "openvino", "model": "model.xml", "weights": "model.bin", "io": io,
               "settings": {"device": "CPU", "inference_precision": precision, "threads": threads}}
    return Runner(str(folder), {"runtime": runtime, "inputs": [], "outputs": []}, threads=threads).run


def _built(backend: str, mode: str, build) -> dict:
    """One candidate row: ``build()`` gives (run function, (8-bit units, float units)); its failure, one line."""
    try:
        run, units = build()
    except Exception as err:  # noqa: BLE001 - a quantizer's crash is a figure of this bench, not its end
        return {"backend": backend, "mode": mode, "error": f"{type(err).__name__}: {str(err).strip()[:300]}"}
    return {"backend": backend, "mode": mode, "run": run, "units": units}


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
    if hasattr(metric, "score"):  # an edgeopt Metric, bound to ``ds`` (its FP32 figure made on it)
        return metric.score(run, ds)
    outputs = [run(f) for f in ds.feeds()]
    if metric == "top1":
        pred = np.array([int(np.argmax(next(iter(o.values())))) for o in outputs])
        return 100.0 * float(np.mean(pred == ds.labels))
    return float(metric(outputs, ds.labels))


# ---------------------------------------------------------------------------------- the real-models cases
# the CTC recogniser, the detector, the embedder, the VAD (bench/real_models.py) and the GRU (bench/matrix_cases.py),
# with their data builders: each case's eval data is split in half here, one half --eval (the search), one unseen
CASE_MODULES = {"rapidocr_rec_ctc": "real_models", "rapidocr_det_dbnet": "real_models",
                "minilm_l6_embedding": "real_models", "silero_vad": "real_models", "g2p_gru": "matrix_cases"}


@dataclass
class Setup:
    model: Path
    files: dict[str, Path]  # calib, eval (convert's --eval), test (unseen)
    calib: Dataset
    test: Dataset
    metric: object  # "top1", a user metric function, or an edgeopt MetricSpec (None: chosen automatically)
    cli_metric: list[str]  # the --metric flags convert gets for the same metric
    data: str
    metric_name: str = ""


def case_setup(name: str, work: Path) -> Setup:
    """A ``Case`` of bench/real_models.py or bench/matrix_cases.py, its input shapes fixed in the model file."""
    import importlib

    import onnx

    from edgeopt.metrics import MetricSpec
    from edgeopt.model import fix_input_shapes

    sys.path.insert(0, str(REPO / "bench"))
    case = importlib.import_module(CASE_MODULES[name]).CASES[name](work)
    model = case.model
    if case.shapes:
        model = work / f"{name}-fixed.onnx"
        onnx.save(fix_input_shapes(onnx.load(str(case.model)), case.shapes), str(model))
    search, unseen = case.eval.split(0.5, seed=2)
    files = {}
    for part, ds in (("calib", case.calib), ("eval", search), ("test", unseen)):
        files[part] = work / f"{name}_{part}.npz"
        np.savez(files[part], **ds.arrays, **({} if ds.labels is None else {"labels": ds.labels}))
    spec = MetricSpec(**case.metric) if case.metric else None
    flags = []
    if case.metric:
        flags = ["--metric", case.metric["name"]] + (["--metric-threshold", str(case.metric["threshold"])]
                                                       if "threshold" in case.metric else [])
    return Setup(model, files, case.calib, unseen, spec, flags, f"{case.kind}: {case.data}")


def legacy_setup(name: str, work: Path) -> Setup:
    """The first three models (resemblyzer's LSTM with the user's metric, the digits CNN, rapidocr_cls)."""
    if name == "lstm":
        sys.path.insert(0, str(REPO / "bench"))
        from speaker_metric import verification

        model, files, metric = speaker_encoder(work), speaker_data(work), verification
        flags, data = ["--metric", "speaker_metric:verification"], \
            "espeak-ng speech, 12 voices as speakers (labels by construction)"
    elif name == "rapidocr_cls":
        (model, files), metric = text_line_data(work), "top1"
        flags, data = [], "rendered text lines, every other one turned 180° (labels by construction)"
    else:
        model, files, metric = REPO / "fixtures" / "models" / "digits_cnn.onnx", digits_data(work), "top1"
        flags, data = [], "sklearn digits, human labels"
    calib, test = load_npz(files["calib"]), load_npz(files["test"])
    rank = {"lstm": 3, "cnn": 4, "rapidocr_cls": 4}[name]
    calib.ranks = test.ranks = {k: rank for k in calib.arrays}
    label = "100 - EER % of speaker verification (user metric)" if name == "lstm" else "top1 %"
    return Setup(model, files, calib, test, metric, flags, data, label)


def choice(model: Path, files: dict, backend: str, bound: float, metric: list[str], threads: int, work: Path) -> dict:
    """``edgeopt convert --precision int8 --max-accuracy-drop`` as a user runs it; the mode it chose and why."""
    out = work / f"chosen-{backend}"
    cmd = [sys.executable, "-m", "edgeopt", "convert", str(model), "--profile", "host", "--backend", backend,
           "--precision", "int8", "--calib", str(files["calib"]), "--eval", str(files["eval"]),
           "--max-accuracy-drop", str(bound), "--threads", str(threads), "-o", str(out), "--json"]
    cmd += metric
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO / "bench", timeout=1800)
    row = {"command": " ".join(["edgeopt", *cmd[3:]]), "exit": r.returncode}
    if r.returncode != 0:
        row["error"] = r.stderr.strip().splitlines()[-1:] if r.stderr else []
        return row
    manifest = json.loads((out / "manifest.json").read_text())
    # ONNX Runtime's INT8 is the qdq stage's (an artifact written before the rename names it 'quantize')
    stage = ("qdq", "quantize") if backend == "onnxruntime" else (backend,)
    rep = next(s["report"] for s in manifest["stages"] if s["name"] in stage)
    kept = (rep.get("accuracy_aware") or {}).get("kept_in_float") or []
    row.update(stages=[s["name"] for s in manifest["stages"]], artifact=str(out), kept_in_float=[k.get("node") or k.get("quantizer") if isinstance(k, dict) else k
                                                 for k in kept],
               mode=rep.get("mode"), quantized=rep.get("quantized"), mode_reason=rep.get("mode_reason"),
               int8_activations=rep.get("int8_activations"),
               inference_precision=manifest["runtime"].get("settings", {}).get("inference_precision"),
               mode_search=rep.get("mode_search"), speed=(rep.get("speed") or {}).get("speedup_vs_fp32"),
               validation={k: manifest["validation"].get(k) for k in ("metric", "metric_reference", "metric_value",
                                                                       "metric_drop")})
    return row


TIMING_S = 6.0  # seconds of timed calls per model, at least (blocks of 30 to 500 calls)


def run_model(name: str, work: Path, bound: float, rounds: int, threads: int) -> dict:
    import os

    from edgeopt.metrics import make_metric
    from edgeopt.runtime.quick_timing import blocked_latency_ms

    su = case_setup(name, work) if name in CASE_MODULES else legacy_setup(name, work)
    built = candidates(su.model, normalized(su.model, su.calib, work), su.calib, work, threads)
    chosen = {b: choice(su.model, su.files, b, bound, su.cli_metric, threads, work) for b in ("onnxruntime", "openvino")}
    rows = [r for r in built if "run" in r] + [r for b, c in chosen.items() if (r := chosen_row(b, c, threads))]
    metric = su.metric
    if not (metric == "top1" or callable(metric)):  # an edgeopt metric, its FP32 figure on the unseen data
        metric = make_metric(rows[0]["run"], su.test, su.metric)
        su.metric_name = f"{metric.name} ({metric.unit}, {'labels' if metric.labels_used else 'vs FP32'})"
    for r in rows:
        r["metric_unseen"] = round(score(r["run"], su.test, metric), 3)
    feed, load_before = su.test.feed(0), os.getloadavg()
    # 30 calls a block, more for fast models (about TIMING_S in all): 30 calls of the 20 us digits CNN are a 0.6 ms
    # block, where its normalized FP32 (the same ops) timed 16 % off the shipped FP32
    latency = blocked_latency_ms({f"{r['backend']} {r['mode']}": r["run"] for r in rows}, feed, calls=30,
                                 rounds=rounds, target_s=TIMING_S)
    load_after = os.getloadavg()
    ref, fp32_metric = latency["onnxruntime fp32"], rows[0]["metric_unseen"]
    for r in rows:
        key = f"{r['backend']} {r['mode']}"
        r.update(p50_ms=latency[key], x_vs_ort_fp32=round(ref / latency[key], 3),
                 drop=round(fp32_metric - r["metric_unseen"], 3), quantized_units=r["units"][0],
                 float_units=r["units"][1], within_bound=fp32_metric - r["metric_unseen"] <= bound)
        del r["run"], r["units"]
    best, best_int8 = best_single(rows), best_single(rows, int8_only=True)
    fastest = {"any": best_single(rows, with_chosen=True), "int8": best_single(rows, int8_only=True, with_chosen=True)}
    for r in rows:
        if r.get("chosen_by_convert"):
            same = best_single([x for x in rows if x["backend"] == r["backend"]], int8_only=True, with_chosen=True)
            chosen[r["backend"]]["vs_fastest"] = versus_fastest(r, {**fastest, "int8_same_backend": same})
    return {"model": name, "data": su.data, "threads": threads,
            "load_avg_during_timing": {"before": [round(x, 2) for x in load_before],
                                       "after": [round(x, 2) for x in load_after]},
            "metric": su.metric_name or "top1 %", "samples": {"calib": len(su.calib), "unseen": len(su.test)},
            "bound_points": bound, "rows": rows + [r for r in built if "error" in r],
            "best_single_candidate_within_bound": best and {k: best[k] for k in ("backend", "mode", "x_vs_ort_fp32")},
            "best_int8_within_bound": best_int8 and {k: best_int8[k] for k in ("backend", "mode", "x_vs_ort_fp32")},
            "fastest_within_bound": _brief(fastest["any"]), "fastest_int8_within_bound": _brief(fastest["int8"]),
            "compared": "fastest_*: plain rows (built from the normalized graph) and convert's chosen rows together, "
                        "within the bound on unseen data; _int8: INT8 rows only, with bf16 activations too (--precision "
                        "int8 does not pick plain bf16, by decision)", "chosen": chosen}


def _brief(r: dict | None) -> dict | None:
    return r and {k: r[k] for k in ("backend", "mode", "x_vs_ort_fp32")}


def versus_fastest(r: dict, fastest: dict) -> dict:
    """A chosen row's speed as a share of the fastest within the bound (all rows, and INT8 rows only)."""
    out = {"within_bound_on_unseen": r["within_bound"]}
    for key, f in (("fastest_within_bound", fastest["any"]), ("fastest_int8_within_bound", fastest["int8"]),
                   ("fastest_int8_on_this_backend", fastest["int8_same_backend"])):
        out[key] = None if f is None else round(r["x_vs_ort_fp32"] / f["x_vs_ort_fp32"], 3)
    out["within_5pct_of_fastest_int8"] = out["fastest_int8_within_bound"] is not None and \
        out["fastest_int8_within_bound"] >= 0.95 and r["within_bound"]
    return out


def best_single(rows: list[dict], *, int8_only: bool = False, with_chosen: bool = False) -> dict | None:
    """The fastest candidate within the bound as built plainly (an INT8 mode, or bf16 unless ``int8_only``), and
    convert's chosen rows too with ``with_chosen``."""
    fits = [r for r in rows if "fp32" not in r["mode"] and (with_chosen or not r.get("chosen_by_convert"))
            and "error" not in r and r["within_bound"] and not (int8_only and r["mode"] == "bf16")]
    return max(fits, key=lambda r: r["x_vs_ort_fp32"], default=None)


def _chosen_label(c: dict) -> str:
    """What convert wrote: the mode search's chosen candidate, else the stage's mode (with the ops it kept float)."""
    searched = (c.get("mode_search") or {}).get("chosen")
    label = searched or f"{c['mode']}"
    kept = c.get("kept_in_float") or []
    acts = c.get("int8_activations")  # the static search's hit kept with bf16 activations (a mode's label says it)
    return label + (f", {len(kept)} ops kept float" if kept else "") + \
        (f", {acts} activations" if acts and not searched else "")


def chosen_row(backend: str, c: dict, threads: int) -> dict | None:
    """convert's artifact on ``backend`` as a row of its own, run by its shipped runner (ONNX Runtime's pool
    threads asleep between calls, as the other rows), timed in the same blocks: the searched artifact may keep
    ops float or use other options than the plain candidate of its mode."""
    from edgeopt.runtime.runners import open_runner, read_manifest

    if c.get("exit") != 0:
        return None
    manifest = read_manifest(c["artifact"])
    if backend == "onnxruntime":
        manifest["runtime"].setdefault("settings", {})["allow_spinning"] = False
    runner = open_runner(c["artifact"], threads=threads, manifest=manifest)
    q = c.get("quantized") or {}
    return {"backend": backend, "mode": f"chosen by convert: {_chosen_label(c)}", "chosen_by_convert": True,
            "run": runner.run, "units": (q.get("quantized_units"), q.get("float_units"))}


# ---------------------------------------------------------------------------------- the README table
BACKEND_NAMES = {"onnxruntime": "ONNX Runtime", "openvino": "OpenVINO"}


def table(results: list[dict]) -> str:
    """The README's markdown table from this script's JSON outputs: every row, the modes convert chose in bold,
    and per model the best single candidate within the bound and how the choices compare with it."""
    lines = ["| model | backend | mode | metric on unseen data (drop) | p50 ms | × ORT FP32 | ops 8-bit / float |",
             "|---|---|---|---|---|---|---|"]
    for m in (m for r in results for m in r["models"]):
        first = f"{m['model']} ({m['samples']['unseen']} unseen, bound {m['bound_points']:g})"
        for r in m["rows"]:
            mode = r["mode"].replace("fp32 (f32 hint)", "FP32 (f32 hint)").replace("fp32", "FP32")
            if r.get("chosen_by_convert"):
                mode = f"**{mode.removeprefix('chosen by convert: ')}** (convert's choice)"
            if "error" in r:
                cells = [f"failed to build: {r['error'].splitlines()[-1][:100]}", "–", "–", "–"]
            else:
                over = "" if r["within_bound"] else ", over"
                drop = "" if "fp32" in r["mode"] and r["backend"] == "onnxruntime" else f" ({r['drop']:g}{over})"
                cells = [f"{r['metric_unseen']:g}{drop}", f"{r['p50_ms']:.3g}", f"{r['x_vs_ort_fp32']:.2f}",
                         f"{r['quantized_units']} / {r['float_units']}"]
            lines.append(f"| {first} | {BACKEND_NAMES[r['backend']]} | {mode} | " + " | ".join(cells) + " |")
            first = ""
    return "\n".join(lines)


def _named(r: dict | None) -> str:
    return f"{BACKEND_NAMES[r['backend']]} {r['mode']} ×{r['x_vs_ort_fp32']:.2f}" if r else "none"


def _versus(r: dict | None, fastest: dict | None) -> str:
    if r is None:
        return ""
    said = f" ×{r['x_vs_ort_fp32']:.2f}"
    if not r["within_bound"]:
        return said + f", over the bound on unseen data (drop {r['drop']:g})"
    if fastest is None:
        return said
    share = r["x_vs_ort_fp32"] / fastest["x_vs_ort_fp32"]
    return said + f": {share:.2f} of the fastest INT8 ({'within' if share >= 0.95 else 'not within'} 5 %)"


def summary(results: list[dict]) -> str:
    """One line per model: the fastest within the bound among plain and chosen rows (all, and INT8 only), and each
    backend's choice against the INT8 one."""
    out = []
    for m in (m for r in results for m in r["models"]):
        best, int8 = best_single(m["rows"], with_chosen=True), best_single(m["rows"], int8_only=True, with_chosen=True)
        said = [f"{m['model']}: fastest within the bound (plain and chosen rows) " + _named(best) +
                ", of the INT8 rows " + _named(int8)]
        mine = {r["backend"]: r for r in m["rows"] if r.get("chosen_by_convert")}
        for b, c in m["chosen"].items():
            if c.get("exit"):
                said.append(f"{BACKEND_NAMES[b]} exit {c['exit']} ({' '.join(c.get('error') or [])[:120]})")
            else:
                said.append(f"{BACKEND_NAMES[b]} chose {_chosen_label(c)}" + _versus(mine.get(b), int8))
        out.append("; ".join(said))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="lstm,cnn", help="lstm, cnn, rapidocr_cls, " + ", ".join(CASE_MODULES))
    ap.add_argument("--bound", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--table", nargs="+", metavar="JSON", help="print the README table of these outputs, run nothing")
    args = ap.parse_args()
    if args.table:
        results = [json.loads(Path(f).read_text()) for f in args.table]
        print(table(results) + "\n\n" + summary(results))
        return
    from edgeopt.converters.registry import distributions
    from edgeopt.runtime import environment

    out = {"what": "INT8 modes x backends and native float precisions (bf16 where the CPU has it): metric on unseen "
                   f"data, p50 vs ONNX Runtime FP32 (blocks, {args.threads} thread(s)), "
                   "and the mode convert chose", "environment": environment.collect(libraries=distributions()), "models": []}
    out["environment"].pop("_cpu_counters_before", None)
    with tempfile.TemporaryDirectory() as d:
        for name in args.models.split(","):
            work = Path(d) / name
            work.mkdir()
            out["models"].append(run_model(name, work, args.bound, args.rounds, args.threads))
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
