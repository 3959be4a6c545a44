"""The staged artifact: stage k with its exit head is a model of its own, converted by the profile's backend like
any model, in ``stage<k>/`` of the artifact; ``cascade.json`` holds their order, the tensors between them and the
exit thresholds; ``load.py`` (written with the consumer check, as for any artifact) runs it with numpy and the
runtime alone.

Staged rather than one ONNX model with ``If`` nodes: ``If`` with sub-graphs converts to neither TFLite (onnx2tf)
nor TVM's static graphs, OpenVINO and ONNX Runtime's graph optimizers don't fuse across sub-graph boundaries, and a
data-dependent branch keeps each backend's quantizer from calibrating the later stages. Separate models are plain
graphs every backend converts, quantizes and checks as it does a whole model; the price is one call per stage
(measured, and counted when an exit is judged to pay).
"""

from __future__ import annotations

import json
from pathlib import Path

from edgeopt.converters.early_exit import cuts as C
from edgeopt.converters.early_exit import heads as H
from edgeopt.enums import Precision

CASCADE_FILE = "cascade.json"
# a backend that compiles the chain's QDQ model (it does not quantize itself) gets stages cut from that model
QDQ_BEFORE_CUT = {"mode": "static", "quantized": "before the cut (the chain's QDQ model)",
                  "why": "each stage holds the quantize/dequantize nodes of its part, their scales calibrated on "
                         "--calib through the whole model: on the activations that reach that stage"}
STAGE_CALIB = 300  # --calib samples each INT8 stage is calibrated on, where the backend names no subset size


def write_stage_models(model: Path, ctx, parts: dict, enabled: list[int], thresholds: list[float], shares, report):
    """The stage models (ONNX, each with its head but the last) for the ``enabled`` exits, and each one's check
    inputs: the draft :func:`run_staged` hands to the backend."""
    from edgeopt.data import Dataset

    work: Path = parts["work"]
    cut_names = [parts["cut_names"][k] for k in enabled]
    bounds = [parts["inputs"], *[[c] for c in cut_names]]
    checks = ctx.check_samples if ctx.check_samples is not None else ctx.eval
    _, raw = H.compute(parts["tapped"], checks, cut_names, parts["output"], ctx.threads, keep_raw=len(checks))
    stages = []
    for i in range(len(cut_names) + 1):
        last = i == len(cut_names)
        outs = [parts["output"]] if last else [cut_names[i]]
        path = C.extract(model, work / f"stage{i}.onnx", bounds[i], outs)
        entry = {"dir": f"stage{i}", "inputs": bounds[i], "feature": None if last else cut_names[i]}
        if not last:
            k = enabled[i]
            C.with_head(path, cut_names[i], parts["ranks"][cut_names[i]], *parts["heads"][k], prefix=f"exit{i}")
            entry.update(exit_output=f"exit{i}_logits", threshold=float(thresholds[i]))
        check = checks if i == 0 else Dataset({cut_names[i - 1]: raw[i - 1]}, source="early-exit features",
                                              ranks={cut_names[i - 1]: raw[i - 1].ndim})
        stages.append({"path": path, "entry": entry, "check": check})
    shares_on = [float(shares[k]) for k in enabled] + [float(shares[-1])]
    report["exits"] = [{"tensor": c, "threshold": round(float(t), 6), "share_search": round(s, 4)}
                       for c, t, s in zip(cut_names, thresholds, shares_on, strict=False)]
    return {"stages": stages, "output": parts["output"], "scores": "probabilities" if parts["probabilities"]
            else "logits", "kind": parts["kind"], "exit_shares": shares_on, "plain_ms": report.get("plain_ms"),
            "predicted_mean_ms": report.get("predicted_mean_ms"), "costed_with": report.get("costed_with")}


def run_staged(stage, spec, inter, ctx, run_stage):
    """The backend run on each stage model in its own folder of the artifact, then ``cascade.json`` and
    ``load.py``; the cascade is then timed in that backend's runtime against the same model without exits, converted
    by the same backend (:mod:`.verify`), and kept only where it pays: else that plain model is the artifact.
    Returns the Intermediate whose ``runtime`` entry names the cascade (or the plain model's)."""
    from edgeopt.converters.base import Intermediate
    from edgeopt.converters.early_exit.verify import keep_or_plain, plain_by_backend

    draft = inter.notes["cascade"]
    root = Path(ctx.artifact_dir)
    plain = plain_by_backend(stage, spec, inter, ctx, run_stage)
    stage_spec, calibs = _stage_quantization(stage, spec, ctx, draft)
    if inter.precision == Precision.INT8 and not stage.quantizes_itself:
        draft["report"]["stage_int8"] = QDQ_BEFORE_CUT
    saved = (ctx.artifact_dir, ctx.check_samples, ctx.calib, ctx.eval, ctx.reference_model)
    parts, last = [], None
    try:
        for s, calib in zip(draft["stages"], calibs, strict=True):
            sub = root / s["entry"]["dir"]
            sub.mkdir(parents=True, exist_ok=True)
            ctx.artifact_dir, ctx.check_samples, ctx.calib, ctx.eval = sub, s["check"], calib or s["check"], None
            ctx.reference_model = s["path"]
            part_in = Intermediate(s["path"], inter.format, inter.precision, {})
            last = run_stage(stage, stage_spec, part_in, ctx)
            parts.append(_part_entry(s, last.notes["runtime"]))
    finally:
        ctx.artifact_dir, ctx.check_samples, ctx.calib, ctx.eval, ctx.reference_model = saved
    cascade = {"format": 1, "output": draft["output"], "scores": draft["scores"], "stages": parts,
               "exit_shares_at_convert": draft["exit_shares"], "plain_ms_at_convert": draft["plain_ms"],
               "predicted_mean_ms_at_convert": draft["predicted_mean_ms"], "stage_ms_at_convert": draft["stage_ms"],
               "timed_with": draft["costed_with"]}
    (root / CASCADE_FILE).write_text(json.dumps(cascade, indent=2))
    measured = keep_or_plain(root, draft, plain, ctx)
    if measured is not None:
        return measured  # the plain model: the exits don't pay in the backend's runtime
    cascade["measured_at_convert"] = draft["report"]["measured"]
    cascade["plain"] = draft["plain"]  # the model without exits, kept in plain/ for bench to time beside
    (root / CASCADE_FILE).write_text(json.dumps(cascade, indent=2))
    last_rt, first_rt = parts[-1]["runtime"], parts[0]["runtime"]
    io = {"inputs": first_rt.get("io", {}).get("inputs"), "outputs": last_rt.get("io", {}).get("outputs")}
    runtime = {**last_rt, "model": f"{parts[-1]['dir']}/{last_rt['model']}", "io": io, "cascade": CASCADE_FILE}
    return Intermediate(root / CASCADE_FILE, last.format, last.precision, {**inter.notes, "runtime": runtime,
                                                                           "cascade": None})


def _stage_quantization(stage, spec, ctx, draft):
    """(the backend's stage spec, each stage's calibration set or None). A backend that quantizes each stage itself
    (OpenVINO: NNCF; TFLite: ai-edge-quantizer, fed through each stage's signature) calibrates stage k on the tensors stage k-1 hands on for ``--calib``, with static INT8 and no
    per-stage accuracy search (a stage's output is a feature map, not classes): the cascade as a whole is judged by
    the run's validation like any artifact."""
    from edgeopt.data import Dataset
    from edgeopt.enums import Precision, QuantMode

    n = len(draft["stages"])
    if not (stage.quantizes_itself and getattr(spec.config, "precision", None) == Precision.INT8):
        return spec, [None] * n
    cfg = spec.config.model_copy(update={"mode": QuantMode.STATIC, "bound": type(spec.config.bound)()})
    # as many samples as the backend's quantizer takes (NNCF's subset_size, ai-edge-quantizer's calib_samples)
    keep = min(len(ctx.calib), getattr(cfg, "subset_size", None) or getattr(cfg, "calib_samples", STAGE_CALIB))
    cuts = [s["entry"]["feature"] for s in draft["stages"][:-1]]
    _, raw = H.compute(draft["tapped"], ctx.calib, cuts, draft["output"], ctx.threads, keep_raw=keep)
    calibs = [ctx.calib] + [Dataset({c: r}, source="early-exit features of --calib", ranks={c: r.ndim})
                            for c, r in zip(cuts, raw, strict=True)]
    draft["report"]["stage_int8"] = {"mode": QuantMode.STATIC.value, "preset": getattr(cfg, "preset", None) and
                                     cfg.preset.value, "calibration_samples": keep,
                                     "why": "each stage quantized by the backend on its own input tensors; no "
                                            "per-stage accuracy search: the cascade is judged as a whole"}
    return spec.model_copy(update={"config": cfg}), calibs


def _part_entry(s: dict, runtime: dict) -> dict:
    """One stage of ``cascade.json``: where it is, its runtime entry, the tensors it takes and gives."""
    import onnx

    from edgeopt.model import graph_inputs, graph_outputs

    proto = onnx.load(str(s["path"]), load_external_data=False)
    io = {kind: [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype} for t in specs]
          for kind, specs in (("inputs", graph_inputs(proto)), ("outputs", graph_outputs(proto)))}
    return {**s["entry"], "runtime": runtime, **io}
