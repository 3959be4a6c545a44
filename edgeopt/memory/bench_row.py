"""``bench --memory``: an artifact's measured peak resident memory beside its predicted peak, and the error."""

from __future__ import annotations

import json
from pathlib import Path

from edgeopt.memory.measure import measure_peak
from edgeopt.memory.predict import size_text


def predicted_of(artifact_dir: str | Path) -> dict | None:
    """The manifest's prediction; for an artifact without one (converted before it was recorded, or bench's FP32
    reference), predicted from its source ONNX model at its backend and precision."""
    manifest = json.loads((Path(artifact_dir) / "manifest.json").read_text())
    mem = manifest.get("memory") or {}
    if mem.get("predicted"):
        return mem["predicted"]
    src = Path(manifest.get("source_model", {}).get("path") or "")
    if src.suffix != ".onnx" or not src.is_file():
        return None
    from edgeopt.memory.predict import predict_memory

    shapes = {t["name"]: tuple(t["shape"]) for t in manifest.get("inputs", [])
              if all(isinstance(d, int) and d > 0 for d in t["shape"])}
    pred = predict_memory(src, manifest["backend"], manifest["precision"], input_shapes=shapes)
    return pred.model_copy(update={"live_bytes": [], "node_names": []}).model_dump(mode="json")


def memory_row(artifact_dir: str | Path, threads: int | None = None, runs: int = 10) -> dict:
    """{measured: peak bytes by phase and how, predicted: the estimate, error_pct: (predicted - measured) /
    measured}."""
    return beside_prediction(measure_peak(artifact_dir, runs=runs, threads=threads), predicted_of(artifact_dir))


def beside_prediction(measured: dict, predicted: dict | None) -> dict:
    """A measurement (peak bytes by phase) with the prediction and the error, as :func:`memory_row` gives them."""
    row = {"measured": measured, "predicted": predicted}
    if predicted and "peak_bytes" in measured:
        row["error_pct"] = round(100 * (predicted["total_bytes"] - measured["peak_bytes"]) / measured["peak_bytes"], 1)
    return row


def memory_text(name: str, row: dict, where: str = "peak RSS in a child process") -> str:
    m, p = row["measured"], row.get("predicted")
    if "error" in m:
        return f"memory {name}: not measured ({m['error']})"
    pred = f"predicted {size_text(p['total_bytes'])} ({row['error_pct']:+.0f} %)" if p and "error_pct" in row else \
        "no prediction"
    return (f"memory {name}: measured peak {size_text(m['peak_bytes'])} (load {size_text(m['load_bytes'])}, first "
            f"inference {size_text(m['first_inference_bytes'])}), {pred}; {where}")
