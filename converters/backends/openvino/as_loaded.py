"""OpenVINO's graph as loaded: the compiled model's runtime model (``compiled.get_runtime_model()``), each
executed op with the precision it runs at (rt_info ``runtimePrecision``, ``outputPrecisions``), compiled as the
runner compiles it (device, inference precision hint, threads)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path


def _info(rt_info, key: str) -> str | None:
    """An rt_info entry as text (OpenVINO wraps it in an ``OVAny``), None where absent."""
    if key not in rt_info:
        return None
    value = rt_info[key]
    return value if isinstance(value, str) else str(value.astype(str) if hasattr(value, "astype") else value)


def runtime_ops(compiled) -> list[dict]:
    """The executed ops: name, layer type, runtime precision, output precisions."""
    out = []
    for op in compiled.get_runtime_model().get_ordered_ops():
        rt = op.get_rt_info()
        out.append({"name": op.get_friendly_name(), "layer_type": _info(rt, "layerType") or op.get_type_name(),
                    "runtime_precision": _info(rt, "runtimePrecision"),
                    "output_precisions": _info(rt, "outputPrecisions")})
    return out


def summarize(ops: list[dict], *, device: str, hint: str | None, out_path: str | None = None) -> dict:
    """Counts of the executed ops by layer type and by runtime precision (Parameter/Result/Constant left out)."""
    real = [o for o in ops if o["layer_type"] not in ("Parameter", "Result", "Input", "Output", "Const")]
    by_precision = Counter(o["runtime_precision"] or "unknown" for o in real)
    by_type = Counter(o["layer_type"] for o in real)
    per_type_precision = Counter(f"{o['layer_type']}:{o['runtime_precision'] or 'unknown'}" for o in real)
    facts = {
        "runtime": "openvino",
        "graph": f"the compiled model's runtime graph on {device} (INFERENCE_PRECISION_HINT {hint})",
        "device": device,
        "inference_precision": hint,
        "nodes": len(real),
        "op_types": dict(sorted(by_type.items(), key=lambda kv: (-kv[1], kv[0]))),
        "runtime_precision": dict(sorted(by_precision.items(), key=lambda kv: (-kv[1], kv[0]))),
        "op_type_precision": dict(sorted(per_type_precision.items())),
    }
    if out_path:
        facts["written"] = out_path
    return facts


def as_loaded(artifact_dir: str | Path, manifest: dict, out_path: str | Path | None = None) -> tuple[dict, list]:
    """Compile the artifact as the runner does; its runtime model's facts (the runtime model written as IR to
    ``out_path`` when given) and the executed ops."""
    from edgeopt.runtime.runners import open_runner

    with open_runner(str(artifact_dir)) as runner:
        compiled = runner.compiled
        ops = runtime_ops(compiled)
        if out_path:
            import openvino as ov

            ov.save_model(compiled.get_runtime_model(), str(out_path), compress_to_fp16=False)
        facts = summarize(ops, device=runner.device, hint=runner.properties.get("INFERENCE_PRECISION_HINT"),
                          out_path=str(out_path) if out_path else None)
    return facts, ops
