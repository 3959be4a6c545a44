"""``analyze`` of an early-exit artifact: the mean latency predicted from the exit shares measured at convert time
(``cascade.json``), and the worst case (every stage and every head: a sample that leaves at none).

Each stage's time and the plain model's are ONNX Runtime's, one thread, on the converting host; the shares are the
search half of ``--eval``'s. With the source model at hand the ratios also scale the profile's roofline estimate of
the plain model: an estimate of the mean and the worst case on the device, for inputs like ``--eval``."""

from __future__ import annotations

import json
from pathlib import Path

CASCADE_FILE = "cascade.json"


def is_cascade(path: Path) -> bool:
    return Path(path).is_dir() and (Path(path) / CASCADE_FILE).is_file()


def cascade_prediction(artifact: Path) -> dict:
    """The predicted mean and worst case of the cascade in ``artifact`` from what its convert recorded."""
    c = json.loads((Path(artifact) / CASCADE_FILE).read_text())
    shares, plain = c.get("exit_shares_at_convert") or [], c.get("plain_ms_at_convert")
    stage_ms = c.get("stage_ms_at_convert")
    out = {"stages": len(c["stages"]), "exit_shares_at_convert": shares, "plain_ms_at_convert": plain,
           "timed_with": c.get("timed_with"), "shares_from": "the search half of --eval at convert time"}
    if stage_ms and len(stage_ms) == len(shares):
        ran, mean = 0.0, 0.0
        for share, ms in zip(shares, stage_ms, strict=True):
            ran += ms
            mean += share * ran
        out.update(stage_ms_at_convert=stage_ms, predicted_mean_ms=round(mean, 4), worst_case_ms=round(ran, 4))
    else:  # an artifact written before the stage times were kept: its convert's prediction, no worst case
        out.update(predicted_mean_ms=c.get("predicted_mean_ms_at_convert"), worst_case_ms=None)
    if plain:
        for key, ratio in (("predicted_mean_ms", "mean_vs_plain"), ("worst_case_ms", "worst_case_vs_plain")):
            if out.get(key) is not None:
                out[ratio] = round(out[key] / plain, 3)
    measured = c.get("measured_at_convert")
    if measured:
        out["measured_at_convert"] = measured
    return out


def on_profile(prediction: dict, estimate_ms: float, unit: str) -> dict:
    """The ratios applied to the profile's roofline estimate of the plain model (an estimate, labelled so)."""
    out = {"unit": unit, "plain_estimate_ms": round(estimate_ms, 4), "estimate": True}
    for ratio, key in (("mean_vs_plain", "mean_estimate_ms"), ("worst_case_vs_plain", "worst_case_estimate_ms")):
        if prediction.get(ratio) is not None:
            out[key] = round(estimate_ms * prediction[ratio], 4)
    return out


def with_profile(prediction: dict, result) -> dict:
    """``prediction`` with :func:`on_profile` from the analysis of the source model (its first unit)."""
    if result.predictions:
        first = result.predictions[0]
        prediction["on_profile"] = on_profile(prediction, first.estimate_ms, first.unit_name)
    return prediction


def emit_alone(prediction: dict, json_out: bool) -> None:
    """The prediction alone, where the source model is not at hand (no estimate for the profile)."""
    from edgeopt.cli.output import emit

    note = "  (the source model is not at the path its manifest names: no estimate for the profile)"
    emit(json_out, {"early_exit": prediction},
         lambda console: console.print("\n".join([*lines(prediction), note]), markup=False))


def source_model(artifact: Path) -> Path | None:
    """The model the artifact was converted from, where it is still at the path its manifest names."""
    try:
        manifest = json.loads((Path(artifact) / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    path = (manifest.get("source_model") or {}).get("path")
    return Path(path) if path and Path(path).is_file() and path.endswith(".onnx") else None


def lines(p: dict) -> list[str]:
    """The human-readable lines."""
    shares = ", ".join(f"{s:.0%}" for s in p["exit_shares_at_convert"])
    out = [f"early exit: {p['stages']} stages; exit shares at convert {shares} (the last: the full model)"]
    mean, worst, plain = p.get("predicted_mean_ms"), p.get("worst_case_ms"), p.get("plain_ms_at_convert")
    if mean is not None and plain:
        text = f"  predicted mean {mean:.3f} ms ({p['mean_vs_plain']:.2f}x the plain {plain:.3f} ms)"
        if worst is not None:
            text += f", worst case {worst:.3f} ms ({p['worst_case_vs_plain']:.2f}x)"
        out.append(text + f" [{p.get('timed_with')}]")
    m = p.get("measured_at_convert")
    if m:
        out.append(f"  measured at convert in {m.get('backend')}: mean {m['cascade_ms']:.3f} ms vs {m['plain_ms']:.3f}"
                   f" ms plain ({m['ratio']:.2f}x, {m['samples']} held-back samples)")
    dev = p.get("on_profile")
    if dev and dev.get("mean_estimate_ms") is not None:
        worst_text = (f", worst case {dev['worst_case_estimate_ms']:.3g} ms" if dev.get("worst_case_estimate_ms")
                      is not None else "")
        out.append(f"  on the profile's {dev['unit']} (estimate): mean {dev['mean_estimate_ms']:.3g} ms{worst_text} "
                   f"(plain {dev['plain_estimate_ms']:.3g} ms)")
    return out
