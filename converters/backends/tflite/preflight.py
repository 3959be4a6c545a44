"""TFLite's pre-flight: the op types onnx2tf converts (one module per op in ``onnx2tf/ops``; read without
importing onnx2tf, which would import TensorFlow)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from edgeopt.analyze.preflight import ok, op_types, unsupported
from edgeopt.analyze.result import PreflightIssue
from edgeopt.errors import MissingDependencyError
from edgeopt.profiles import BackendTarget


def onnx2tf_ops() -> set[str] | None:
    spec = importlib.util.find_spec("onnx2tf")
    if spec is None or not spec.submodule_search_locations:
        return None
    ops_dir = Path(list(spec.submodule_search_locations)[0]) / "ops"
    return {p.stem for p in ops_dir.glob("*.py") if p.stem[:1].isupper()}


def check_tflite(model, target: BackendTarget) -> list[PreflightIssue]:
    ops = onnx2tf_ops()
    if ops is None:
        raise MissingDependencyError("onnx2tf is not installed", "install it with: pip install 'edgeopt[tflite]'")
    missing = [op for op in op_types(model) if op not in ops]
    if missing:
        return [unsupported(target, missing, "onnx2tf has no converter for them")]
    if "micro" in target.settings:
        from edgeopt.converters.backends.tflite.micro.onnx_ops import onnx_ops_tflm_lacks

        lacks = onnx_ops_tflm_lacks(model)
        if lacks:
            how = "TFLite Micro lacks what onnx2tf makes of them: " + "; ".join(
                f"{m['onnx_op']} -> {m['tflite_op']}, use {m['alternative']}" for m in lacks)
            return [unsupported(target, [m["onnx_op"] for m in lacks], how)]
    return [ok(target, f"onnx2tf converts all {len(op_types(model))} op types")]
