"""Per-layer times from the backends' own profilers, joined with the roofline's per-op predictions.

Each backend names its profiler on its class (``per_layer_profiler``, in ``converters/backends/<name>/per_layer.py``):
``(artifact_dir, manifest, feeds, *, threads, runs)`` -> rows (``name``, ``op_type``, ``measured_us``: means over
``runs`` inferences), or (rows, facts), or a dict when it has no times (the answer as it stands, e.g. TFLite's
static op breakdown). A backend whose rows don't carry the ONNX node names names a matcher too
(``per_layer_matcher``). A backend without a profiler says "not available for <backend>".
"""

from __future__ import annotations

import os


def _resolve(backend: str, attribute: str):
    """The function the backend's class names in ``attribute`` (a "module:function" reference), or None."""
    from edgeopt.converters.registry import get_backend, resolve

    try:
        ref = getattr(get_backend(backend), attribute)
    except Exception:  # noqa: BLE001 - an unknown backend has none
        return None
    return resolve(ref) if ref else None


def profiler_for(backend: str):
    """The backend's per-op profiler, named by its class (``per_layer_profiler``), or None."""
    return _resolve(backend, "per_layer_profiler")


def join_with_predictions(measured: list[dict], predicted: list[dict]) -> list[dict]:
    """Measured vs roofline-predicted time per op, ops furthest above their roof first.

    ``predicted``: ``{"name", "predicted_us", "bound"?}``. Ops without a prediction come last.
    """
    pred = {p["name"]: p for p in predicted}
    rows = []
    for m in measured:  # a TVM kernel names the ONNX node it was matched to in "onnx_node"
        p = pred.get(m.get("onnx_node") or m["name"])
        pu = p.get("predicted_us") if p else None
        ratio = m["measured_us"] / pu if pu else None
        rows.append({**m, "predicted_us": pu, "bound": (p or {}).get("bound"), "measured_over_predicted": ratio})
    return sorted(rows, key=lambda r: (r["measured_over_predicted"] is None, -(r["measured_over_predicted"] or 0),
                                       -r["measured_us"]))


def roofline_predictions(model_path: str, profile_name: str | None) -> tuple[list[dict] | None, str | None]:
    """Per-op roofline times from ``edgeopt.analyze`` (estimate), or (None, why not)."""
    try:
        from edgeopt.analyze import analyze_model
        from edgeopt.profiles import load_profile

        res = analyze_model(model_path, load_profile(profile_name or "host"), preflight=False)
    except ImportError:
        return None, "edgeopt.analyze is not available"
    except Exception as err:  # noqa: BLE001 - the join is optional
        return None, f"roofline analysis failed: {type(err).__name__}: {str(err)[:160]}"
    return [{"name": o.name, "op_type": o.op_type, "predicted_us": o.time_us, "bound": o.bound.value}
            for o in res.ops], None


def per_layer_for_artifact(artifact_dir: str, manifest: dict, feeds: dict, *, threads: int | None = None,
                           profile: str | None = None, runs: int = 20) -> dict:
    backend = manifest["runtime"]["backend"]
    fn = profiler_for(backend)
    if fn is None:
        return {"available": False, "note": f"per-layer times are not available for {backend}"}
    measured = fn(artifact_dir, manifest, feeds, threads=threads, runs=runs)
    if isinstance(measured, dict):  # no timings (a static breakdown): said as such
        return measured
    extra: dict = {}
    if isinstance(measured, tuple):  # (rows, backend-specific facts)
        measured, extra = measured
    out = {"available": True, "backend": backend, "runs": runs, "total_measured_us": sum(m["measured_us"] for m in measured),
           **extra}
    model_file = os.path.join(artifact_dir, manifest["runtime"]["model"])
    onnx_model = model_file if model_file.endswith(".onnx") else (manifest.get("source_model") or {}).get("path")
    predicted, why = roofline_predictions(onnx_model, profile) if onnx_model else (None, "no ONNX model to analyze")
    matcher, how = _resolve(backend, "per_layer_matcher"), "by name (fused/renamed ones did not)"
    if predicted is not None and matcher is not None:
        out["matched_by"], how = matcher(measured, predicted)
    if predicted is None:
        out["ops"] = sorted(measured, key=lambda m: -m["measured_us"])
        out["note"] = f"no roofline join: {why}"
    else:
        out["ops"] = join_with_predictions(measured, predicted)
        matched = sum(1 for o in out["ops"] if o["predicted_us"] is not None)
        out["matched"] = matched
        out["note"] = (f"predicted_us is the roofline estimate at FP32 on the profile's primary unit; {matched} of "
                       f"{len(measured)} measured ops matched an ONNX node {how}")
    return out
