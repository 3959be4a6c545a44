"""TVM's pre-flight: the op types the Relax ONNX importer converts (``onnx_frontend._get_convert_map()``)."""

from __future__ import annotations

from edgeopt.analyze.preflight import ok, op_types, unsupported
from edgeopt.analyze.result import PreflightIssue
from edgeopt.profiles import BackendTarget


def check_tvm(model, target: BackendTarget) -> list[PreflightIssue]:
    from edgeopt.deps import require

    frontend = require("tvm.relax.frontend.onnx.onnx_frontend", "pre-flight")
    convert_map = frontend._get_convert_map()
    missing = [op for op in op_types(model) if op not in convert_map]
    if missing:
        return [unsupported(target, missing, "not in the Relax ONNX importer's convert map")]
    return [ok(target, f"the Relax ONNX importer converts all {len(op_types(model))} op types")]
